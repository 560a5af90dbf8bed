/*
 * A stand-in libnvidia-ml.so.1 for rankscope's tests: it implements the NVML
 * entry points the agent's sampler calls, with devices and values described
 * by a small text file, so the real nvml-wrapper code path runs on machines
 * without a GPU. Built by the test suite with `cc -shared -fPIC`.
 *
 * The file is named by $RANKSCOPE_NVML_STUB_CONFIG, else it is `nvml-stub.conf`
 * in the directory of this library (so tests running in parallel in one
 * process each load their own copy with their own file), and re-read whenever its
 * modification time or size changes (checked in nvmlDeviceGetCount_v2, i.e.
 * once per sampling tick), so a test can change a GPU while the agent runs.
 * One directive per line, '#' starts a comment:
 *
 *   init_error <code>             nvmlInit_v2 returns <code> (e.g. 9 = driver not loaded)
 *   driver_version <text>         default 550.54.15
 *   device_count <n>              default 0, at most 64
 *   gpu <i> <key> <value...>      a value of GPU i (defaults below)
 *
 * GPU keys and defaults (i = GPU index):
 *   name <text>                   "NVIDIA H100 80GB HBM3"
 *   uuid <text>                   GPU-00000000-0000-0000-0000-0000000000<ii>
 *   bus_id <text>                 00000000:<10+i hex>:00.0
 *   util_gpu <pct> util_mem <pct> 50, 20
 *   mem_total <bytes> mem_used <bytes>            85899345920, 1073741824
 *   power_mw <mW> power_limit_mw <mW>             300000, 700000
 *   temp_c <C>                    60
 *   clock_sm <MHz> clock_mem <MHz> clock_sm_max <MHz> clock_mem_max <MHz>
 *                                 1980, 2619, 1980, 2619
 *   throttle <mask>               0 (strtoull base 0: 0x48 works)
 *   pcie_tx_kbps <KB/s> pcie_rx_kbps <KB/s>        1000, 2000
 *   nvlink_tx_kib_s <KiB/s> nvlink_rx_kib_s <KiB/s> cumulative counters that
 *                                 grow at this rate (CLOCK_MONOTONIC); 0, 0
 *   ecc_corrected <n> ecc_uncorrected <n>          0, 0
 *   pcie_replays <n>              0 (nvmlDeviceGetPcieReplayCounter)
 *   gpm <0|1>                     GPM supported; 0
 *   gpm_sm_active <pct> gpm_sm_occupancy <pct> gpm_tensor <pct> gpm_dram <pct>
 *   gpm_pcie_tx_mib_s <MiB/s> gpm_pcie_rx_mib_s gpm_nvlink_tx_mib_s gpm_nvlink_rx_mib_s
 *   process <pid> <bytes|-1>      a compute process (repeatable; -1 = unknown memory)
 *   xid <code>                    a critical Xid event, delivered once (repeatable)
 *   unsupported <what>            NOT_SUPPORTED for: util memory power power_limit
 *                                 temp clocks max_clocks throttle pcie nvlink ecc
 *                                 processes xid gpm name uuid pci pcie_replay
 *   lost 1                        every call on the GPU returns GPU_IS_LOST (15)
 *   error <code>                  every call on the GPU returns <code>
 *
 * Every entry point counts its calls; nvmlStubCalls() returns the total and
 * nvmlStubCallsOf("nvmlDeviceGetPcieReplayCounter") those of one entry point
 * (tests assert how often the agent makes a costly read).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_GPUS 64
#define MAX_PROCS 16
#define MAX_XIDS 16

enum {
    OK = 0,
    ERR_UNINITIALIZED = 1,
    ERR_INVALID_ARGUMENT = 2,
    ERR_NOT_SUPPORTED = 3,
    ERR_INSUFFICIENT_SIZE = 7,
    ERR_TIMEOUT = 10,
    ERR_GPU_IS_LOST = 15,
};

enum {
    U_UTIL = 1 << 0,
    U_MEMORY = 1 << 1,
    U_POWER = 1 << 2,
    U_POWER_LIMIT = 1 << 3,
    U_TEMP = 1 << 4,
    U_CLOCKS = 1 << 5,
    U_MAX_CLOCKS = 1 << 6,
    U_THROTTLE = 1 << 7,
    U_PCIE = 1 << 8,
    U_NVLINK = 1 << 9,
    U_ECC = 1 << 10,
    U_PROCESSES = 1 << 11,
    U_XID = 1 << 12,
    U_GPM = 1 << 13,
    U_NAME = 1 << 14,
    U_UUID = 1 << 15,
    U_PCI = 1 << 16,
    U_PCIE_REPLAY = 1 << 17,
};

struct gpu {
    unsigned index;
    char name[96], uuid[96], bus_id[32];
    unsigned util_gpu, util_mem;
    unsigned long long mem_total, mem_used;
    unsigned power_mw, power_limit_mw, temp_c;
    unsigned clock_sm, clock_mem, clock_sm_max, clock_mem_max;
    unsigned long long throttle;
    unsigned pcie_tx_kbps, pcie_rx_kbps;
    double nvlink_tx_kib_s, nvlink_rx_kib_s;
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned pcie_replays;
    int gpm;
    double gpm_sm_active, gpm_sm_occupancy, gpm_tensor, gpm_dram;
    double gpm_pcie_tx, gpm_pcie_rx, gpm_nvlink_tx, gpm_nvlink_rx;
    unsigned nprocs;
    unsigned proc_pid[MAX_PROCS];
    unsigned long long proc_mem[MAX_PROCS];
    unsigned nxids;
    unsigned xid[MAX_XIDS];
    unsigned unsupported;
    int error;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct gpu gpus[MAX_GPUS];
static unsigned xids_delivered[MAX_GPUS];
static unsigned device_count;
static int init_error;
static int initialized;
static char driver_version[80] = "550.54.15";
static struct timespec loaded_mtime;
static off_t loaded_size = -1;
static struct timespec t0;
static unsigned long long calls;

/* Calls per entry point, by name (__func__ of the entry point). */
#define MAX_FNS 96
static struct { const char *name; unsigned long long n; } fn_calls[MAX_FNS];
static unsigned fn_count;
static pthread_mutex_t fn_lock = PTHREAD_MUTEX_INITIALIZER;

unsigned long long nvmlStubCalls(void) { return __atomic_load_n(&calls, __ATOMIC_RELAXED); }

/* The slot of `name`, added when `add`; fn_count when absent. Under fn_lock. */
static unsigned fn_slot(const char *name, int add) {
    unsigned i = 0;
    while (i < fn_count && fn_calls[i].name != name && strcmp(fn_calls[i].name, name) != 0) i++;
    if (i == fn_count && add && fn_count < MAX_FNS) fn_calls[fn_count++].name = name;
    return i;
}

static void count_call(const char *name) {
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&fn_lock);
    unsigned i = fn_slot(name, 1);
    if (i < fn_count) fn_calls[i].n++;
    pthread_mutex_unlock(&fn_lock);
}

unsigned long long nvmlStubCallsOf(const char *name) {
    pthread_mutex_lock(&fn_lock);
    unsigned i = fn_slot(name, 0);
    unsigned long long n = i < fn_count ? fn_calls[i].n : 0;
    pthread_mutex_unlock(&fn_lock);
    return n;
}

#define COUNT() count_call(__func__)

static void defaults(struct gpu *g, unsigned i) {
    memset(g, 0, sizeof *g);
    g->index = i;
    snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
    snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-0000000000%02u", i);
    snprintf(g->bus_id, sizeof g->bus_id, "00000000:%02X:00.0", 0x10 + i);
    g->util_gpu = 50;
    g->util_mem = 20;
    g->mem_total = 85899345920ULL;
    g->mem_used = 1073741824ULL;
    g->power_mw = 300000;
    g->power_limit_mw = 700000;
    g->temp_c = 60;
    g->clock_sm = 1980;
    g->clock_mem = 2619;
    g->clock_sm_max = 1980;
    g->clock_mem_max = 2619;
    g->pcie_tx_kbps = 1000;
    g->pcie_rx_kbps = 2000;
}

static unsigned unsupported_bit(const char *w) {
    static const struct { const char *name; unsigned bit; } map[] = {
        {"util", U_UTIL}, {"memory", U_MEMORY}, {"power", U_POWER},
        {"power_limit", U_POWER_LIMIT}, {"temp", U_TEMP}, {"clocks", U_CLOCKS},
        {"max_clocks", U_MAX_CLOCKS}, {"throttle", U_THROTTLE}, {"pcie", U_PCIE},
        {"nvlink", U_NVLINK}, {"ecc", U_ECC}, {"processes", U_PROCESSES},
        {"xid", U_XID}, {"gpm", U_GPM}, {"name", U_NAME}, {"uuid", U_UUID},
        {"pci", U_PCI}, {"pcie_replay", U_PCIE_REPLAY},
    };
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (strcmp(map[k].name, w) == 0) return map[k].bit;
    return 0;
}

static void set_gpu(struct gpu *g, const char *key, char *rest) {
#define NUM(field) if (strcmp(key, #field) == 0) { g->field = strtoull(rest, NULL, 0); return; }
#define DBL(field) if (strcmp(key, #field) == 0) { g->field = strtod(rest, NULL); return; }
#define STR(field) if (strcmp(key, #field) == 0) { snprintf(g->field, sizeof g->field, "%s", rest); return; }
    STR(name) STR(uuid) STR(bus_id)
    NUM(util_gpu) NUM(util_mem) NUM(mem_total) NUM(mem_used) NUM(power_mw) NUM(power_limit_mw)
    NUM(temp_c) NUM(clock_sm) NUM(clock_mem) NUM(clock_sm_max) NUM(clock_mem_max) NUM(throttle)
    NUM(pcie_tx_kbps) NUM(pcie_rx_kbps) NUM(ecc_corrected) NUM(ecc_uncorrected) NUM(gpm)
    NUM(pcie_replays)
    DBL(nvlink_tx_kib_s) DBL(nvlink_rx_kib_s)
    DBL(gpm_sm_active) DBL(gpm_sm_occupancy) DBL(gpm_tensor) DBL(gpm_dram)
    if (strcmp(key, "gpm_pcie_tx_mib_s") == 0) { g->gpm_pcie_tx = strtod(rest, NULL); return; }
    if (strcmp(key, "gpm_pcie_rx_mib_s") == 0) { g->gpm_pcie_rx = strtod(rest, NULL); return; }
    if (strcmp(key, "gpm_nvlink_tx_mib_s") == 0) { g->gpm_nvlink_tx = strtod(rest, NULL); return; }
    if (strcmp(key, "gpm_nvlink_rx_mib_s") == 0) { g->gpm_nvlink_rx = strtod(rest, NULL); return; }
    if (strcmp(key, "process") == 0 && g->nprocs < MAX_PROCS) {
        char *end;
        g->proc_pid[g->nprocs] = strtoul(rest, &end, 0);
        g->proc_mem[g->nprocs] = (unsigned long long)strtoll(end, NULL, 0);
        g->nprocs++;
        return;
    }
    if (strcmp(key, "xid") == 0 && g->nxids < MAX_XIDS) { g->xid[g->nxids++] = strtoul(rest, NULL, 0); return; }
    if (strcmp(key, "unsupported") == 0) { g->unsupported |= unsupported_bit(rest); return; }
    if (strcmp(key, "lost") == 0) { if (atoi(rest)) g->error = ERR_GPU_IS_LOST; return; }
    if (strcmp(key, "error") == 0) { g->error = atoi(rest); return; }
#undef NUM
#undef DBL
#undef STR
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
    return s;
}

/* Re-reads the config file if it changed. Caller holds `lock`. */
static const char *config_path(void) {
    static char path[4096];
    const char *env = getenv("RANKSCOPE_NVML_STUB_CONFIG");
    if (env != NULL && *env) return env;
    if (path[0]) return path;
    Dl_info info;
    if (dladdr((void *)&config_path, &info) == 0 || info.dli_fname == NULL) return NULL;
    snprintf(path, sizeof path, "%s", info.dli_fname);
    char *slash = strrchr(path, '/');
    if (slash == NULL) { path[0] = 0; return "nvml-stub.conf"; }
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "nvml-stub.conf");
    return path;
}

static void reload(void) {
    const char *path = config_path();
    struct stat st;
    if (path == NULL || stat(path, &st) != 0) {
        if (loaded_size != -1) device_count = 0;
        loaded_size = -1;
        return;
    }
    if (st.st_size == loaded_size && st.st_mtim.tv_sec == loaded_mtime.tv_sec &&
        st.st_mtim.tv_nsec == loaded_mtime.tv_nsec)
        return;
    FILE *f = fopen(path, "r");
    if (f == NULL) return;
    loaded_size = st.st_size;
    loaded_mtime = st.st_mtim;
    for (unsigned i = 0; i < MAX_GPUS; i++) defaults(&gpus[i], i);
    device_count = 0;
    init_error = 0;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (*s == 0) continue;
        char *key = strtok(s, " \t");
        char *rest = strtok(NULL, "");
        rest = rest ? trim(rest) : "";
        if (strcmp(key, "init_error") == 0) init_error = atoi(rest);
        else if (strcmp(key, "driver_version") == 0) snprintf(driver_version, sizeof driver_version, "%s", rest);
        else if (strcmp(key, "device_count") == 0) {
            device_count = strtoul(rest, NULL, 0);
            if (device_count > MAX_GPUS) device_count = MAX_GPUS;
        } else if (strcmp(key, "gpu") == 0) {
            char *end;
            unsigned i = strtoul(rest, &end, 0);
            if (i >= MAX_GPUS) continue;
            char *k = strtok(end, " \t");
            char *v = strtok(NULL, "");
            if (k) set_gpu(&gpus[i], k, v ? trim(v) : "");
        }
    }
    fclose(f);
}

typedef struct gpu *dev_t_;

/* Checks the handle and the GPU's injected error; returns the error or OK. */
static int enter(const char *fn, dev_t_ d, unsigned what) {
    count_call(fn);
    if (!initialized) return ERR_UNINITIALIZED;
    if (d == NULL || d < gpus || d >= gpus + MAX_GPUS) return ERR_INVALID_ARGUMENT;
    if (d->error) return d->error;
    if (d->unsupported & what) return ERR_NOT_SUPPORTED;
    return OK;
}

#define ENTER(d, what) do { int e_ = enter(__func__, (d), (what)); if (e_) return e_; } while (0)

int nvmlInit_v2(void) {
    COUNT();
    pthread_mutex_lock(&lock);
    loaded_size = -2; /* force a read */
    reload();
    int e = init_error;
    if (!e) {
        initialized = 1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
    }
    pthread_mutex_unlock(&lock);
    return e;
}

int nvmlInit(void) { return nvmlInit_v2(); }

int nvmlInitWithFlags(unsigned flags) { (void)flags; return nvmlInit_v2(); }

int nvmlShutdown(void) { COUNT(); initialized = 0; return OK; }

const char *nvmlErrorString(int r) {
    switch (r) {
    case OK: return "Success";
    case ERR_NOT_SUPPORTED: return "Not Supported";
    case ERR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *out, unsigned len) {
    COUNT();
    if (!initialized) return ERR_UNINITIALIZED;
    snprintf(out, len, "%s", driver_version);
    return OK;
}

int nvmlSystemGetNVMLVersion(char *out, unsigned len) {
    COUNT();
    snprintf(out, len, "12.550.54.15-stub");
    return OK;
}

int nvmlDeviceGetCount_v2(unsigned *count) {
    COUNT();
    if (!initialized) return ERR_UNINITIALIZED;
    pthread_mutex_lock(&lock);
    reload();
    *count = device_count;
    pthread_mutex_unlock(&lock);
    return OK;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned i, dev_t_ *out) {
    COUNT();
    if (!initialized) return ERR_UNINITIALIZED;
    if (i >= device_count) return ERR_INVALID_ARGUMENT;
    if (gpus[i].error) return gpus[i].error;
    *out = &gpus[i];
    return OK;
}

int nvmlDeviceGetIndex(dev_t_ d, unsigned *i) { ENTER(d, 0); *i = d->index; return OK; }

int nvmlDeviceGetName(dev_t_ d, char *out, unsigned len) {
    ENTER(d, U_NAME);
    snprintf(out, len, "%s", d->name);
    return OK;
}

int nvmlDeviceGetUUID(dev_t_ d, char *out, unsigned len) {
    ENTER(d, U_UUID);
    snprintf(out, len, "%s", d->uuid);
    return OK;
}

struct pci_info { char bus_id_legacy[16]; unsigned domain, bus, device, pci_device_id, pci_subsystem_id; char bus_id[32]; };

int nvmlDeviceGetPciInfo_v3(dev_t_ d, struct pci_info *p) {
    ENTER(d, U_PCI);
    memset(p, 0, sizeof *p);
    snprintf(p->bus_id_legacy, sizeof p->bus_id_legacy, "%.15s", d->bus_id);
    snprintf(p->bus_id, sizeof p->bus_id, "%s", d->bus_id);
    p->bus = 0x10 + d->index;
    p->pci_device_id = 0x233010de;
    return OK;
}

struct utilization { unsigned gpu, memory; };

int nvmlDeviceGetUtilizationRates(dev_t_ d, struct utilization *u) {
    ENTER(d, U_UTIL);
    u->gpu = d->util_gpu;
    u->memory = d->util_mem;
    return OK;
}

struct memory_v1 { unsigned long long total, free, used; };
struct memory_v2 { unsigned version; unsigned long long total, reserved, free, used; };

int nvmlDeviceGetMemoryInfo(dev_t_ d, struct memory_v1 *m) {
    ENTER(d, U_MEMORY);
    m->total = d->mem_total;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_used;
    return OK;
}

int nvmlDeviceGetMemoryInfo_v2(dev_t_ d, struct memory_v2 *m) {
    ENTER(d, U_MEMORY);
    m->total = d->mem_total;
    m->reserved = 0;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_used;
    return OK;
}

int nvmlDeviceGetPowerUsage(dev_t_ d, unsigned *mw) { ENTER(d, U_POWER); *mw = d->power_mw; return OK; }

int nvmlDeviceGetEnforcedPowerLimit(dev_t_ d, unsigned *mw) {
    ENTER(d, U_POWER_LIMIT);
    *mw = d->power_limit_mw;
    return OK;
}

int nvmlDeviceGetTemperature(dev_t_ d, unsigned sensor, unsigned *t) {
    ENTER(d, U_TEMP);
    if (sensor != 0) return ERR_INVALID_ARGUMENT;
    *t = d->temp_c;
    return OK;
}

int nvmlDeviceGetClockInfo(dev_t_ d, unsigned type, unsigned *mhz) {
    ENTER(d, U_CLOCKS);
    switch (type) {
    case 0: case 1: *mhz = d->clock_sm; return OK;
    case 2: *mhz = d->clock_mem; return OK;
    default: return ERR_NOT_SUPPORTED;
    }
}

int nvmlDeviceGetMaxClockInfo(dev_t_ d, unsigned type, unsigned *mhz) {
    ENTER(d, U_MAX_CLOCKS);
    switch (type) {
    case 0: case 1: *mhz = d->clock_sm_max; return OK;
    case 2: *mhz = d->clock_mem_max; return OK;
    default: return ERR_NOT_SUPPORTED;
    }
}

int nvmlDeviceGetCurrentClocksThrottleReasons(dev_t_ d, unsigned long long *mask) {
    ENTER(d, U_THROTTLE);
    *mask = d->throttle;
    return OK;
}

int nvmlDeviceGetCurrentClocksEventReasons(dev_t_ d, unsigned long long *mask) {
    return nvmlDeviceGetCurrentClocksThrottleReasons(d, mask);
}

int nvmlDeviceGetSupportedClocksThrottleReasons(dev_t_ d, unsigned long long *mask) {
    ENTER(d, U_THROTTLE);
    *mask = 0x1ff;
    return OK;
}

int nvmlDeviceGetPcieThroughput(dev_t_ d, unsigned counter, unsigned *kbps) {
    ENTER(d, U_PCIE);
    if (counter == 0) *kbps = d->pcie_tx_kbps;
    else if (counter == 1) *kbps = d->pcie_rx_kbps;
    else return ERR_INVALID_ARGUMENT;
    return OK;
}

int nvmlDeviceGetTotalEccErrors(dev_t_ d, unsigned type, unsigned counter, unsigned long long *n) {
    ENTER(d, U_ECC);
    (void)counter;
    *n = type == 0 ? d->ecc_corrected : d->ecc_uncorrected;
    return OK;
}

int nvmlDeviceGetPcieReplayCounter(dev_t_ d, unsigned *n) {
    ENTER(d, U_PCIE_REPLAY);
    *n = d->pcie_replays;
    return OK;
}

/* nvmlProcessInfo_t as of NVML 11.x (the _v2/_v3 entry points). */
struct process_info { unsigned pid; unsigned long long used; unsigned gi, ci; };

static int processes(dev_t_ d, unsigned *count, struct process_info *out) {
    ENTER(d, U_PROCESSES);
    if (out == NULL || *count < d->nprocs) {
        unsigned have = *count;
        *count = d->nprocs;
        return (d->nprocs == 0 && out == NULL) || (have >= d->nprocs && out != NULL) ? OK : ERR_INSUFFICIENT_SIZE;
    }
    for (unsigned k = 0; k < d->nprocs; k++) {
        out[k].pid = d->proc_pid[k];
        out[k].used = d->proc_mem[k];
        out[k].gi = 0xFFFFFFFFu;
        out[k].ci = 0xFFFFFFFFu;
    }
    *count = d->nprocs;
    return OK;
}

int nvmlDeviceGetComputeRunningProcesses_v3(dev_t_ d, unsigned *c, struct process_info *o) { return processes(d, c, o); }
int nvmlDeviceGetComputeRunningProcesses_v2(dev_t_ d, unsigned *c, struct process_info *o) { return processes(d, c, o); }

/* nvmlFieldValue_t */
struct field_value {
    unsigned field_id, scope_id;
    long long timestamp, latency_usec;
    unsigned value_type, nvml_return;
    union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; } value;
};

static double elapsed_s(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
}

int nvmlDeviceGetFieldValues(dev_t_ d, int n, struct field_value *v) {
    ENTER(d, 0);
    double t = elapsed_s();
    for (int k = 0; k < n; k++) {
        v[k].timestamp = (long long)(t * 1e6);
        v[k].latency_usec = 0;
        if ((v[k].field_id == 138 || v[k].field_id == 139) && !(d->unsupported & U_NVLINK)) {
            double rate = v[k].field_id == 138 ? d->nvlink_tx_kib_s : d->nvlink_rx_kib_s;
            v[k].value_type = 3;
            v[k].value.ull = (unsigned long long)(rate * t);
            v[k].nvml_return = OK;
        } else {
            v[k].nvml_return = ERR_NOT_SUPPORTED;
        }
    }
    return OK;
}

/* GPM */
struct gpm_sample { struct gpu *dev; };
struct gpm_support { unsigned version, supported; };
struct gpm_metric {
    unsigned metric_id, nvml_return;
    double value;
    char *short_name, *long_name, *unit;
};
struct gpm_metrics_get {
    unsigned version, num_metrics;
    struct gpm_sample *sample1, *sample2;
    struct gpm_metric metrics[210];
};

int nvmlGpmQueryDeviceSupport(dev_t_ d, struct gpm_support *s) {
    ENTER(d, 0);
    s->supported = d->gpm && !(d->unsupported & U_GPM);
    return OK;
}

int nvmlGpmSampleAlloc(struct gpm_sample **out) {
    COUNT();
    *out = calloc(1, sizeof **out);
    return *out ? OK : 20;
}

int nvmlGpmSampleFree(struct gpm_sample *s) { COUNT(); free(s); return OK; }

int nvmlGpmSampleGet(dev_t_ d, struct gpm_sample *s) {
    ENTER(d, U_GPM);
    if (!d->gpm) return ERR_NOT_SUPPORTED;
    s->dev = d;
    return OK;
}

int nvmlGpmMetricsGet(struct gpm_metrics_get *req) {
    COUNT();
    if (req->sample1 == NULL || req->sample2 == NULL || req->sample2->dev == NULL) return ERR_INVALID_ARGUMENT;
    struct gpu *d = req->sample2->dev;
    for (unsigned k = 0; k < req->num_metrics && k < 210; k++) {
        struct gpm_metric *m = &req->metrics[k];
        m->nvml_return = OK;
        m->short_name = m->long_name = m->unit = NULL;
        switch (m->metric_id) {
        case 2: m->value = d->gpm_sm_active; break;
        case 3: m->value = d->gpm_sm_occupancy; break;
        case 5: m->value = d->gpm_tensor; break;
        case 10: m->value = d->gpm_dram; break;
        case 20: m->value = d->gpm_pcie_tx; break;
        case 21: m->value = d->gpm_pcie_rx; break;
        case 60: m->value = d->gpm_nvlink_rx; break;
        case 61: m->value = d->gpm_nvlink_tx; break;
        default: m->nvml_return = ERR_NOT_SUPPORTED; m->value = 0;
        }
    }
    return OK;
}

/* Events (critical Xid errors only) */
struct event_set { unsigned long long types[MAX_GPUS]; };
struct event_data { struct gpu *device; unsigned long long type, data; unsigned gi, ci; };

int nvmlEventSetCreate(struct event_set **out) {
    COUNT();
    *out = calloc(1, sizeof **out);
    return *out ? OK : 20;
}

int nvmlEventSetFree(struct event_set *s) { COUNT(); free(s); return OK; }

int nvmlDeviceGetSupportedEventTypes(dev_t_ d, unsigned long long *types) {
    ENTER(d, 0);
    *types = (d->unsupported & U_XID) ? 0 : 8;
    return OK;
}

int nvmlDeviceRegisterEvents(dev_t_ d, unsigned long long types, struct event_set *s) {
    ENTER(d, 0);
    if ((types & 8) && (d->unsupported & U_XID)) return ERR_NOT_SUPPORTED;
    s->types[d->index] |= types;
    return OK;
}

int nvmlEventSetWait_v2(struct event_set *s, struct event_data *out, unsigned timeout_ms) {
    COUNT();
    (void)timeout_ms;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < device_count; i++) {
        if ((s->types[i] & 8) && !gpus[i].error && xids_delivered[i] < gpus[i].nxids) {
            out->device = &gpus[i];
            out->type = 8;
            out->data = gpus[i].xid[xids_delivered[i]++];
            out->gi = out->ci = 0xFFFFFFFFu;
            pthread_mutex_unlock(&lock);
            return OK;
        }
    }
    pthread_mutex_unlock(&lock);
    return ERR_TIMEOUT;
}
