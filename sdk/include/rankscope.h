/*
 * rankscope.h: the C ABI of the rankscope rank SDK (librankscope_sdk.so).
 *
 * A training process streams its steps, spans and collectives to the node's
 * rankscope-agent. Every call returns at once: events go into a bounded
 * queue that a background thread sends; when it is full the event is dropped
 * and counted (RANKSCOPE_DROPPED), never blocking the caller.
 *
 *   rankscope_options o = {0};
 *   o.rank = o.world_size = o.local_rank = -1;   // from RANK/WORLD_SIZE or Slurm
 *   char err[256];
 *   rankscope_client *c = rankscope_init(&o, err, sizeof err);
 *   if (!c) fprintf(stderr, "rankscope: %s\n", err);
 *   rankscope_step_begin(c, 0);
 *   rankscope_span_begin(c, "forward", "forward"); ... rankscope_span_end(c);
 *   rankscope_step_end(c, 0);
 *   rankscope_shutdown(c, 2000);
 *
 * Strings are NUL-terminated UTF-8. Times are nanoseconds since the Unix
 * epoch (rankscope_now_ns()). Functions are thread-safe; span_begin/span_end
 * pair up per thread. All functions accept a NULL client (RANKSCOPE_EINVAL).
 */
#ifndef RANKSCOPE_H
#define RANKSCOPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RANKSCOPE_OK 0
#define RANKSCOPE_DROPPED 1   /* queue full: event dropped and counted */
#define RANKSCOPE_EINVAL (-1) /* NULL, not UTF-8, unknown name, bad value */
#define RANKSCOPE_EORDER (-2) /* out of order: step/span end without begin */
#define RANKSCOPE_ECLOSED (-3)
#define RANKSCOPE_EINIT (-4)
#define RANKSCOPE_ETIMEOUT (-5) /* flush timed out or agent not connected */
#define RANKSCOPE_EPANIC (-6)

typedef struct rankscope_client rankscope_client;

/* NULL strings and -1 numbers: taken from the environment (RANKSCOPE_AGENT,
 * RANKSCOPE_JOB_ID / SLURM_JOB_ID / TORCHELASTIC_RUN_ID, RANK / WORLD_SIZE /
 * LOCAL_RANK, SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID). */
typedef struct rankscope_options {
    const char *agent; /* "unix:/path", "/path" or "http://host:port" */
    const char *job_id;
    int64_t rank;
    int64_t world_size;
    int64_t local_rank;
    const char *run_id;
    uint32_t queue_events; /* 0: 65536 */
} rankscope_options;

/* One collective or point-to-point op; matched across ranks by
 * (process_group, seq). op: all_reduce, reduce_scatter, all_gather,
 * all_to_all, broadcast, reduce, send, recv, barrier. dtype: torch names
 * (float32, bfloat16, ...) or NULL. bytes: as nccl-tests defines them. */
typedef struct rankscope_collective {
    const char *op;
    const char *process_group; /* NULL: the default group */
    uint64_t seq;
    uint32_t group_size;
    const char *dtype;
    uint64_t count;
    uint64_t bytes;
    uint64_t start_ns;
    uint64_t end_ns;
    uint32_t peer;   /* send/recv peer's global rank */
    int32_t device;  /* -1: host-side */
    uint32_t stream; /* 0: host-side */
} rankscope_collective;

typedef struct rankscope_stats {
    uint64_t sent;    /* events the agent accepted */
    uint64_t dropped; /* sum of the drop reasons */
    uint64_t dropped_queue_full;
    uint64_t dropped_by_agent;
    uint64_t dropped_disconnected;
    uint64_t rejected; /* events in messages the agent rejected */
    uint64_t invalid_calls;
    uint64_t reconnects;
    uint32_t connected; /* 1 while a stream is open */
    uint64_t dropped_unpaired; /* step markers whose partner the queue dropped */
} rankscope_stats;

/* Returns NULL on error and writes the reason into err (if not NULL). */
rankscope_client *rankscope_init(const rankscope_options *opts, char *err, size_t err_len);
int rankscope_step_begin(const rankscope_client *c, uint64_t step);
int rankscope_step_end(const rankscope_client *c, uint64_t step);
/* category: forward, backward, optimizer, dataloader, compute, communication, memcpy, other */
int rankscope_span_begin(const rankscope_client *c, const char *category, const char *name);
int rankscope_span_end(const rankscope_client *c);
int rankscope_span(const rankscope_client *c, const char *category, const char *name,
                   uint64_t start_ns, uint64_t end_ns, int32_t device, uint32_t stream);
int rankscope_record_collective(const rankscope_client *c, const rankscope_collective *rec);
/* Blocks until everything recorded so far is acknowledged, at most timeout_ms. */
int rankscope_flush(const rankscope_client *c, uint32_t timeout_ms);
int rankscope_get_stats(const rankscope_client *c, rankscope_stats *out);
/* Flushes, closes the stream and frees c. */
void rankscope_shutdown(rankscope_client *c, uint32_t timeout_ms);
uint64_t rankscope_now_ns(void);
const char *rankscope_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* RANKSCOPE_H */
