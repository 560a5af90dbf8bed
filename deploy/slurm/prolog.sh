#!/bin/bash
# Slurm Prolog for rankscope: makes sure this node's agent runs before the
# job's ranks start streaming to it.
#
# Install on every compute node and name it in slurm.conf:
#   Prolog=/etc/slurm/rankscope-prolog.sh
# slurmd runs it as root when a job starts on the node (with
# PrologFlags=Alloc: when the node is allocated). rankscope needs no Epilog:
# the agent forwards events as they come and keeps running between jobs.
#
# It starts rankscope-agent.service (deploy/systemd) when it is not running
# and logs to syslog when that fails. It always exits 0: a failing Prolog
# drains the node, and a job must never be held up by its profiler.

if command -v systemctl >/dev/null 2>&1 \
    && ! systemctl is-active --quiet rankscope-agent.service; then
    if ! systemctl start rankscope-agent.service >/dev/null 2>&1; then
        logger -t rankscope-prolog \
            "job ${SLURM_JOB_ID:-?}: rankscope-agent.service is not running and did not start" \
            2>/dev/null
    fi
fi
exit 0
