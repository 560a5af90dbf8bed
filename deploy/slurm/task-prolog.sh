#!/bin/bash
# Slurm TaskProlog for rankscope: points every task (rank) of every job at
# the rankscope agent of its node.
#
# Install on every compute node, next to rankscope-agent.service
# (deploy/systemd), and name it in slurm.conf:
#   TaskProlog=/etc/slurm/rankscope-task-prolog.sh
#
# slurmstepd runs it as the job's user before each task starts; every line it
# prints as "export NAME=VALUE" lands in that task's environment. It exports
# one variable:
#
#   RANKSCOPE_AGENT  where the rank streams its events: the agent's Unix
#                    socket when this user may open it (mode 0660, the
#                    agent's group), else the agent's TCP port on the
#                    loopback address, which any local process may use.
#                    Read by `rankscope simulate --agent` today, and by the
#                    rank-side client library once it exists.
#
# The job and rank identity need no export: Slurm already gives every task
# SLURM_JOB_ID (the job), SLURM_PROCID (global rank), SLURM_LOCALID (rank on
# the node) and SLURM_NTASKS (world size). rankscope does not read them by
# itself yet, so pass the job id explicitly for now, e.g.
#   rankscope simulate --job "$SLURM_JOB_ID" ...
# (see simulate.sbatch beside this file).
#
# The agent's config file says where it listens; RANKSCOPE_AGENT_CONFIG (the
# variable rankscope-agent itself reads) overrides the path. A rank that
# already has RANKSCOPE_AGENT set keeps it. This script never fails: a task
# prolog error would stop the task, and ranks must run without an agent.

config="${RANKSCOPE_AGENT_CONFIG:-/etc/rankscope/agent.toml}"

if [ -n "${RANKSCOPE_AGENT:-}" ]; then
    exit 0
fi

# The value of a top-level string key of the agent's TOML file, or nothing.
toml_string() {
    sed -n "s/^[[:space:]]*$1[[:space:]]*=[[:space:]]*\"\([^\"]*\)\".*/\1/p" "$config" 2>/dev/null | tail -n 1
}

socket="$(toml_string unix_socket_path)"
socket="${socket:-/run/rankscope/agent.sock}"
listen="$(toml_string listen_addr)"
listen="${listen:-127.0.0.1:7710}"
# An agent listening on every address is reachable on the loopback one.
case "$listen" in
    0.0.0.0:*) listen="127.0.0.1:${listen#0.0.0.0:}" ;;
esac

if [ -S "$socket" ] && [ -r "$socket" ] && [ -w "$socket" ]; then
    echo "export RANKSCOPE_AGENT=unix:$socket"
else
    echo "export RANKSCOPE_AGENT=http://$listen"
fi
exit 0
