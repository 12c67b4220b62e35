# One job: a reporter, forked in its own process group (the shell that
# forks it has job control on) by the kernel's shell or, ahead of its job,
# by a prepared template (see zygote.bash), and the job's shell, which the
# reporter forks at once and which becomes a bash of its own, `bash -c`:
# so `$$` is the command's shell, `kill $$` ends this run alone, and `$0`,
# `$LINENO` and error messages read as in `bash -c`. That bash restores
# the snapshot, takes its job (in a template, ahead of it: `job_take.bash`),
# runs the command on its line 1 and captures the shell state it leaves
# (the group after it); the reporter outlives it and reports `finished
# GROUP STATUS`.
  # The reporter outlives the job's cancel signals; the job's shell does
  # not (a trapped signal is reset to its default in the subshell).
  __eukhe_group=$BASHPID
  trap ':' INT TERM HUP
  (
    # The reporter's traps are not the user's (`trap -p` in a subshell
    # shows the parent's until the subshell sets its own).
    trap - INT TERM HUP
@TAKE@
  )
  builtin printf 'finished\0%s\0%s\0' "$__eukhe_group" "$?" >&4
