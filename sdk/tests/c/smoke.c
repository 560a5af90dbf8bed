/* Drives the C ABI as a C framework would: identity from the environment,
 * three steps with a span and a collective each, an out-of-order call, a
 * bad init, flush, stats. argv[1] is the agent URL. */
#include <stdio.h>
#include <string.h>

#include "rankscope.h"

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    char err[256];
    rankscope_options bad = {0};
    bad.agent = argv[1];
    bad.job_id = "c-job";
    bad.rank = 5;
    bad.world_size = 2;
    bad.local_rank = -1;
    if (rankscope_init(&bad, err, sizeof err) != NULL) return 3;
    printf("badinit=%s\n", err);

    rankscope_options o = {0};
    o.agent = argv[1];
    o.rank = o.world_size = o.local_rank = -1; /* from RANK / WORLD_SIZE */
    rankscope_client *c = rankscope_init(&o, err, sizeof err);
    if (!c) {
        fprintf(stderr, "init: %s\n", err);
        return 4;
    }
    printf("order=%d\n", rankscope_step_end(c, 7));
    for (uint64_t step = 0; step < 3; step++) {
        if (rankscope_step_begin(c, step) != RANKSCOPE_OK) return 5;
        if (rankscope_span_begin(c, "forward", "forward") != RANKSCOPE_OK) return 6;
        if (rankscope_span_end(c) != RANKSCOPE_OK) return 7;
        rankscope_collective coll = {0};
        coll.op = "all_reduce";
        coll.process_group = "0";
        coll.seq = step;
        coll.group_size = 2;
        coll.dtype = "float32";
        coll.count = 1024;
        coll.bytes = 4096;
        coll.start_ns = rankscope_now_ns();
        coll.end_ns = coll.start_ns + 1000;
        coll.device = -1;
        if (rankscope_record_collective(c, &coll) != RANKSCOPE_OK) return 8;
        if (rankscope_step_end(c, step) != RANKSCOPE_OK) return 9;
    }
    int rc = rankscope_flush(c, 20000);
    if (rc != RANKSCOPE_OK) {
        fprintf(stderr, "flush: %s\n", rankscope_strerror(rc));
        return 10;
    }
    rankscope_stats s;
    if (rankscope_get_stats(c, &s) != RANKSCOPE_OK) return 11;
    printf("sent=%llu dropped=%llu connected=%u\n", (unsigned long long)s.sent,
           (unsigned long long)s.dropped, s.connected);
    if (rankscope_step_begin(NULL, 0) != RANKSCOPE_EINVAL) return 12;
    rankscope_shutdown(c, 5000);
    return 0;
}
