#!/bin/sh
# ftrace.sh OUT CMD...: runs CMD with the kernel tracing every fsync and
# fdatasync (entry and exit, every task) and the scheduler's switches and
# wakeups of one thread on the "mono" trace clock (CLOCK_MONOTONIC, the
# clock of the anatomy records' Mono0/Mono1), and writes the trace to OUT.
# The thread is the SQLite writer's: a cpulabels build of ratelane finds
# the instance in $RATELANE_ANATOMY_FTRACE and points the scheduler
# events' filters at its writer thread (until then they match nothing).
# Lines carry the task's process id (record-tgid), so that the task a
# runnable writer waited behind is named by process. Needs root and /sys/kernel/tracing. It uses a trace instance of its own
# (the machine's main trace buffer and clock are left alone) and removes
# it after. The syscall tracepoints cost every system call of the machine
# a little while on. commitanatomy -ftrace OUT joins the trace with the
# build's RATELANE_WRITESTATS records.
set -u
out=$1
shift
I=/sys/kernel/tracing/instances/commitanatomy.$$
mkdir $I || exit 1
evs="syscalls/sys_enter_fsync syscalls/sys_exit_fsync syscalls/sys_enter_fdatasync syscalls/sys_exit_fdatasync sched/sched_switch sched/sched_wakeup"
echo mono >$I/trace_clock
echo 1 >$I/options/record-tgid
echo 16384 >$I/buffer_size_kb
echo "prev_pid == 1 && next_pid == 1" >$I/events/sched/sched_switch/filter
echo "pid == 1 && prio == 1000" >$I/events/sched/sched_wakeup/filter
for e in $evs; do echo 1 >$I/events/$e/enable; done
echo 1 >$I/tracing_on
RATELANE_ANATOMY_FTRACE=$I "$@"
rc=$?
echo 0 >$I/tracing_on
cat $I/trace >"$out"
for e in $evs; do echo 0 >$I/events/$e/enable; done
rmdir $I
exit $rc
