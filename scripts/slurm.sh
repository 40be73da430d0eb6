#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for the tests (tests/cluster/) and for trying the SLURM
# launcher without a cluster: Debian's slurm-wlm and munge, run as root, every file under $SLURM_HOME.
#   scripts/slurm.sh up     start it (or reuse the running one); prints the `export SLURM_CONF=...` line
#   scripts/slurm.sh down   stop it, by the PIDs `up` wrote
# Every srun/sbatch/sinfo/scontrol of your shell needs that SLURM_CONF (not /etc/slurm is written).
set -euo pipefail

SLURM_HOME=${SLURM_HOME:-${TMPDIR:-/tmp}/scratchgpt-slurm} # where config, key, state, logs and PIDs live
UP_TIMEOUT=${SLURM_UP_TIMEOUT:-120}                       # seconds `up` waits for the node to be idle
CONF=$SLURM_HOME/slurm.conf

say() { echo "slurm.sh: $*" >&2; }

running() { # $1: a daemon's name; true when the PID it wrote is alive
	local pid_file=$SLURM_HOME/run/$1.pid
	[ -s "$pid_file" ] && kill -0 "$(cat "$pid_file")" 2>/dev/null
}

install() {
	command -v slurmctld >/dev/null && command -v munged >/dev/null && return
	[ "$(id -u)" = 0 ] || { say "error: slurm-wlm and munge are missing: install them as root (apt-get install slurm-wlm munge)"; exit 2; }
	say "installing Debian's slurm-wlm and munge"
	export DEBIAN_FRONTEND=noninteractive  # no debconf question can wait for an answer
	apt-get install -y slurm-wlm munge >/dev/null || { apt-get update >/dev/null && apt-get install -y slurm-wlm munge >/dev/null; }
}

configure() {
	mkdir -p "$SLURM_HOME"/{run,log,state,spool,munge}
	chmod 755 "$SLURM_HOME/munge" # munged wants its socket reachable by all
	local node cpus mem
	node=$(hostname -s)
	cpus=$(nproc)
	# The node offers what this machine has, less 1 GiB for the daemons and the shell.
	mem=$(($(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) - 1024))
	[ -s "$SLURM_HOME/munge/munge.key" ] || {
		dd if=/dev/urandom bs=1 count=1024 of="$SLURM_HOME/munge/munge.key" 2>/dev/null
		chmod 400 "$SLURM_HOME/munge/munge.key"
	}
	cat >"$CONF" <<EOF
# Written by scripts/slurm.sh: one node, this machine ($cpus CPUs, $mem MiB for jobs).
ClusterName=scratchgpt
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (120 s by default)
AuthInfo=socket=$SLURM_HOME/munge/munge.socket,cred_expire=10
StateSaveLocation=$SLURM_HOME/state
SlurmdSpoolDir=$SLURM_HOME/spool
SlurmctldPidFile=$SLURM_HOME/run/slurmctld.pid
SlurmdPidFile=$SLURM_HOME/run/slurmd.pid
SlurmctldLogFile=$SLURM_HOME/log/slurmctld.log
SlurmdLogFile=$SLURM_HOME/log/slurmd.log
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
# Jobs may be requeued (pre-emption: src/cluster/slurm.py runs scontrol requeue).
JobRequeue=1
# SIGTERM at the time limit, SIGKILL 5 s later: short, so the time-limit tests are.
KillWait=5
# A finished job stays visible to scontrol show job for 10 minutes (there is no accounting database).
MinJobAge=600
SchedulerType=sched/backfill
# Pending jobs (a requeued one) start within seconds, not the default minute.
SchedulerParameters=sched_interval=5,bf_interval=5
MailProg=/bin/true
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
}

wait_idle() {
	local deadline=$((SECONDS + UP_TIMEOUT)) state name
	while ((SECONDS < deadline)); do
		state=$(SLURM_CONF=$CONF sinfo -h -N -o %t 2>/dev/null || true)
		[ "$state" = idle ] && return
		for name in munged slurmctld slurmd; do
			running "$name" || {
				say "error: $name is not running; its log, $SLURM_HOME/log/$name.log, ends:"
				tail -n 5 "$SLURM_HOME/log/$name.log" >&2
				return 1
			}
		done
		sleep 1
	done
	say "error: the node is not idle after ${UP_TIMEOUT}s (sinfo: ${state:-no answer}); see $SLURM_HOME/log/"
	return 1
}

up() {
	if running munged && running slurmctld && running slurmd; then
		say "reusing the running cluster in $SLURM_HOME"
	else
		down quiet
		install
		configure
		export SLURM_CONF=$CONF
		munged --socket="$SLURM_HOME/munge/munge.socket" --key-file="$SLURM_HOME/munge/munge.key" \
			--pid-file="$SLURM_HOME/run/munged.pid" --log-file="$SLURM_HOME/log/munged.log" \
			--seed-file="$SLURM_HOME/munge/munge.seed" --force
		slurmctld -i # -i: ignore state a previous cluster left
		slurmd
		wait_idle || { down quiet; exit 1; } # nothing of a cluster that did not start is left running
	fi
	wait_idle
	say "up: $(SLURM_CONF=$CONF sinfo -h -o '%P %D node, %c CPUs, %m MiB, %t')"
	echo "export SLURM_CONF=$CONF"
}

down() {
	local name pid
	for name in slurmd slurmctld munged; do
		pid=$(cat "$SLURM_HOME/run/$name.pid" 2>/dev/null || true)
		if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
			kill "$pid"
			for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
			kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
		fi
		rm -f "$SLURM_HOME/run/$name.pid"
	done
	[ "${1:-}" = quiet ] || say "down"
}

case "${1:-}" in
up) up ;;
down) down ;;
*)
	echo "usage: scripts/slurm.sh up|down" >&2
	exit 2
	;;
esac
