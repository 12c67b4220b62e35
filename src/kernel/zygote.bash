# eukhe's kernel shell (the zygote): it holds no user state of its own.
# Jobs are forked from it, or from a *template*: a shell it forks ahead of
# the next job. A template forks each job's reporter, and the reporter the
# job's shell, ahead of the job: the job's shell waits for its job on the
# template's FIFO and says on a second FIFO when it has taken one, and the
# template then forks the next, so a job waits for no fork at all. Each
# job's command runs in a bash of its own, which restores the snapshot
# itself (`job.bash`).
#
# fd 3: commands from the kernel, NUL-terminated fields:
#   job JOB STDOUT STDERR RESTORE LATE CAPTURE STDIN TTY COMMAND  (fork a
#     job here; STDIN is the file its command reads, empty for /dev/null;
#     TTY, when not empty, the terminal its shell makes its controlling
#     terminal, leading a session of its own: `tty.rs`)
#   template FIFO TAKEN RESTORE SCRATCH LATE NEXT  (fork a template that
#     restores RESTORE, then forks job shells that take jobs, `JOB
#     STDIN COMMAND`, from FIFO on fd 5 and write `t` to the FIFO TAKEN (fd 6)
#     when they have one, or `e` when FIFO has ended; a job's output
#     FIFOs and capture are SCRATCH/JOB.out, .err and .state, and its own
#     bash sources LATE, which restores RESTORE; after a job is taken,
#     the next job shell is forked
#     when the kernel writes a byte to the FIFO NEXT (fd 7))
# fd 4: reports to the kernel, NUL-terminated: `started JOB GROUP`,
# `finished GROUP STATUS` (a job), `template FIFO PID`, and once, as it
# starts, `defaults DECLARED UMASK`.
unset __eukhe_zygote
# The bash every job's command runs in.
__eukhe_bash=$BASH
# What bash gives every shell it starts, which a job's capture lists though
# no snapshot set it (`HOSTNAME`, `IFS`, `OPTIND`, ..., the umask): the
# kernel adds it to a session's first snapshot.
{ builtin printf 'defaults\0'; builtin declare -p; builtin printf '\0'
  builtin umask -p; builtin printf '\0'; } >&4 2>/dev/null
__eukhe_templates=
set -m
while :; do
  IFS= read -r -d '' -u 3 __eukhe_kind || break
  if [[ $__eukhe_kind == template ]]; then
    IFS= read -r -d '' -u 3 __eukhe_fifo || break
    IFS= read -r -d '' -u 3 __eukhe_taken || break
    IFS= read -r -d '' -u 3 __eukhe_restore || break
    IFS= read -r -d '' -u 3 __eukhe_scratch || break
    IFS= read -r -d '' -u 3 __eukhe_late || break
    IFS= read -r -d '' -u 3 __eukhe_next || break
    (
      trap - INT TERM HUP
      # TAKEN read and write: opening never blocks, and reading never
      # meets an end. FIFO and NEXT end when the kernel drops them.
      exec 3<&- 5<"$__eukhe_fifo" 6<>"$__eukhe_taken" 7<"$__eukhe_next"
      set -m
      builtin printf 'template\0%s\0%s\0' "$__eukhe_fifo" "$BASHPID" >&4
      while :; do
        {
@TEMPLATE_JOB@
        } &
        # The job's shell has taken a job, or found the FIFO closed: the
        # kernel dropped this template.
        IFS= builtin read -r -n 1 -d '' -u 6 __eukhe_word || break
        [[ $__eukhe_word == t ]] || break
        builtin jobs >/dev/null 2>&1
        # Not at once: the forks would take the CPU from the job just
        # taken. The kernel asks once that job's end is on its way, or
        # when the next job comes first.
        IFS= builtin read -r -n 1 -d '' -u 7 __eukhe_word || break
      done
      # Dropped: its waiting reporter ends once its job shell has seen the
      # FIFO closed, and those of jobs still running when their jobs end.
      # Not before that: a reporter this shell left would come to the
      # kernel and be counted as a run's background job.
      builtin wait
    ) >/dev/null 2>&1 &
    __eukhe_templates="$__eukhe_templates $!"
    jobs >/dev/null 2>&1
    continue
  fi
  IFS= read -r -d '' -u 3 __eukhe_job || break
  IFS= read -r -d '' -u 3 __eukhe_out || break
  IFS= read -r -d '' -u 3 __eukhe_err || break
  IFS= read -r -d '' -u 3 __eukhe_restore || break
  IFS= read -r -d '' -u 3 __eukhe_late || break
  IFS= read -r -d '' -u 3 __eukhe_state || break
  IFS= read -r -d '' -u 3 __eukhe_in || break
  IFS= read -r -d '' -u 3 __eukhe_tty || break
  IFS= read -r -d '' -u 3 __eukhe_cmd || break
  {
@JOB@
  } &
  jobs >/dev/null 2>&1
done
# The kernel is gone (its end of fd 3 closed): end the templates, one of
# which may be waiting for ever to open a FIFO nobody will write. Only jobs
# this shell still tracks, so no pid is taken for another process's.
for __eukhe_p in $(builtin jobs -p); do
  if [[ " $__eukhe_templates " == *" $__eukhe_p "* ]]; then
    builtin kill -KILL -- "-$__eukhe_p" 2>/dev/null
  fi
done
