# A job's capture, in its bash after the command on line 1 (read with
# that line, before the command defines any alias): the shell state the
# command left, with builtins only, immune to the user's options,
# functions, aliases, IFS and PATH, the capture's last words its jobs and
# its status; then it closes its output (the kernel may end the run then).
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
