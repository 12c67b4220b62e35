# One job: a reporter, forked in its own process group (the shell that
# forks it has job control on) by the kernel's shell or, ahead of its job,
# by a prepared template (see zygote.bash), and the job's shell, which the
# reporter forks at once. In a template the job's shell takes its job
# itself (the TAKE placeholder), so a job waits for no fork at all. The
# job's shell reports `started JOB GROUP` on fd 4, restores what is not
# restored yet (`$__eukhe_restore`), runs the command and captures the
# shell state it leaves, with builtins only, immune to the user's options,
# functions, aliases, IFS and PATH, the capture's last words its jobs and
# its status, then closes its output (the kernel may end the run then);
# the reporter outlives it and reports `finished GROUP STATUS`. In a
# template the user's functions are defined: so `builtin printf` (a
# function named `builtin`, or after a POSIX special builtin, is never
# kept).
  # The reporter outlives the job's cancel signals; the job's shell does
  # not (a trapped signal is reset to its default in the subshell).
  __eukhe_group=$BASHPID
  trap ':' INT TERM HUP
  (
    # The reporter's traps are not the user's (`trap -p` in a subshell
    # shows the parent's until the subshell sets its own).
    trap - INT TERM HUP
@TAKE@
    exec >"$__eukhe_out" 2>"$__eukhe_err" </dev/null
    builtin printf 'started\0%s\0%s\0' "$__eukhe_job" "$__eukhe_group" >&4
    exec 3<&- 4>&- 5<&- 6>&- 7<&-
    . "$__eukhe_restore"
    # The options the command begins with: if it leaves them so, the
    # capture does not list them (bash writes each line of `set +o` and
    # `shopt -p` with a write of its own, some eighty in all). Not traced
    # (`set -x`), never exported (`set -a`).
    # Under the user's `set -x` or `set -v` the trace shows their command,
    # not this `eval` or eukhe's own words: both stop here (the command is
    # echoed for `-v` as bash would echo the text `eval` reads), and a
    # prefix on the command's first line (so `LINENO` stays the user's)
    # turns them back on. A quoted word is never an alias.
    { __eukhe_so0=$SHELLOPTS __eukhe_bo0=$BASHOPTS __eukhe_x= __eukhe_off=
      [[ -o verbose ]] && __eukhe_off=v
      [[ -o xtrace ]] && __eukhe_off+=x
      if [[ -n $__eukhe_off ]]; then
        builtin set "+$__eukhe_off"
        __eukhe_x="\\builtin unset __eukhe_xoff; \\builtin set -$__eukhe_off; "
        __eukhe_xoff=$__eukhe_off
      fi
      builtin export -n __eukhe_so0 __eukhe_bo0 __eukhe_x __eukhe_off
    } 2>/dev/null
    if [[ $__eukhe_off == *v* ]]; then builtin printf '%s\n' "$__eukhe_cmd" >&2; fi
    eval "$__eukhe_x$__eukhe_cmd" <"${__eukhe_in:-/dev/null}"
    # Everything below runs after the user's command, in its state.
    { __eukhe_st=$?
      # The command did not start (a syntax error, its stdin gone): its
      # options are as they were.
      [[ -n ${__eukhe_xoff-} ]] && builtin set "-$__eukhe_xoff"
      __eukhe_so=$SHELLOPTS __eukhe_bo=$BASHOPTS \
        __eukhe_pcs=${POSIXLY_CORRECT+x} __eukhe_pcv=${POSIXLY_CORRECT-}
      # POSIX mode: special builtins (set, trap, unset, export) are found
      # before any function of the same name.
      POSIXLY_CORRECT=y
      set +euCfvxET +o pipefail
    } 2>/dev/null
    # A function named `builtin` would run in place of every `builtin`
    # below, so it is not kept (`export`, a POSIX special builtin, cannot
    # be shadowed here and tells). Functions named like POSIX special
    # builtins shadow nothing here; the kernel leaves them out.
    __eukhe_dropped=
    export -f builtin 2>/dev/null && { __eukhe_dropped=builtin; unset -f builtin; }
    # No forks and no files below: a few builtins, each printing all of
    # one kind.
    {
      # Out of POSIX mode, `trap -p` lists only the signals trapped.
      builtin printf 'traps\0\0'; builtin set +o posix; builtin trap -p
      builtin set -o posix; builtin printf '\0'
      trap - DEBUG ERR RETURN EXIT
      builtin printf 'cwd\0\0'; builtin pwd; builtin printf '\0'
      if [[ $__eukhe_so != "$__eukhe_so0" ]]; then
        builtin printf 'setopts\0%s\0' "$__eukhe_so"
        builtin set +o; builtin printf '\0'
      fi
      if [[ $__eukhe_bo != "$__eukhe_bo0" ]]; then
        builtin printf 'shopts\0%s\0' "$__eukhe_bo"
        builtin shopt -p; builtin printf '\0'
      fi
      builtin printf 'umask\0\0'; builtin umask -p; builtin printf '\0'
      builtin printf 'dropped\0\0%s\0' "$__eukhe_dropped"
      if [[ -n $__eukhe_pcs ]]; then
        builtin printf 'var\0POSIXLY_CORRECT\0declare -- POSIXLY_CORRECT=%s\0' "${__eukhe_pcv@Q}"
      fi
      # Every variable in one call, one statement a line (bash quotes
      # values with control characters as $'...'); the kernel leaves out
      # bash's own and eukhe's.
      builtin printf 'vars\0\0'; builtin declare -p; builtin printf '\0'
      # Every function: their names, then all of them in one call, in
      # the same (sorted) order; the kernel splits them.
      builtin printf 'funcnames\0\0'; builtin declare -F; builtin printf '\0'
      builtin printf 'funcs\0\0'; builtin declare -f; builtin printf '\0'
      for __eukhe_n in "${!BASH_ALIASES[@]}"; do
        builtin printf 'alias\0%s\0' "$__eukhe_n"
        builtin alias -- "$__eukhe_n"
        builtin printf '\0'
      done
      # Last: the jobs this shell still has, and the status. With no job
      # left, the kernel ends the run as soon as the output closes
      # (below), not after this shell's exit and its reporter's word.
      builtin printf 'jobs\0\0'; builtin jobs -p; builtin printf '\0'
      builtin printf 'status\0\0%s\0' "$__eukhe_st"
    } >"$__eukhe_state" 2>/dev/null
    exec >&- 2>&-
    exit "$__eukhe_st"
  )
  builtin printf 'finished\0%s\0%s\0' "$__eukhe_group" "$?" >&4
