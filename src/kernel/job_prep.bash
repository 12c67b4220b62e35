# A job's bash, before its command (`eval`ed first on its line 1, so the
# command's `eval` is on line 1 too and `$LINENO` counts from 1). One
# group, read whole before the restore defines any alias. It restores the
# snapshot, takes its job (from a template's FIFO on fd 5, ahead of it, or
# the command on fd 5 when the kernel's shell forked it for a known job),
# enters the session's directory again as bash's `cd` would, applies the
# traps and options, and checks the command's syntax.
{
  builtin export -n __eukhe_a __eukhe_take __eukhe_group __eukhe_restore \
    __eukhe_late __eukhe_scratch __eukhe_job __eukhe_out __eukhe_err \
    __eukhe_state __eukhe_in
  builtin unset __eukhe_a
  . "$__eukhe_restore"
  # Bash looks up every signal's first disposition once, at its first
  # `trap -p` out of POSIX mode (some hundred system calls): here, ahead
  # of the job, not in its capture.
  builtin trap -p >/dev/null 2>&1
  if [[ $__eukhe_take == template ]]; then
    # `.` (a claim's RESTORE_AHEAD): the kernel has written a spare's
    # first snapshot over the blank one this bash restored as it started;
    # it restores that now, ahead of the session's first job.
    while IFS= builtin read -r -d '' -u 5 __eukhe_job &&
      [[ $__eukhe_job == . ]]; do
      . "$__eukhe_restore"
    done
    [[ -n $__eukhe_job ]] &&
    IFS= builtin read -r -d '' -u 5 __eukhe_in &&
    IFS= builtin read -r -d '' -u 5 __eukhe_cmd ||
      { builtin printf e >&6; builtin exit 0; }
    builtin printf t >&6
    __eukhe_out=$__eukhe_scratch/$__eukhe_job.out
    __eukhe_err=$__eukhe_scratch/$__eukhe_job.err
    __eukhe_state=$__eukhe_scratch/$__eukhe_job.state
  else
    IFS= builtin read -r -d '' -u 5 __eukhe_cmd
    __eukhe_cmd=${__eukhe_cmd%$'\n'}
  fi
  exec >"$__eukhe_out" 2>"$__eukhe_err" </dev/null
  builtin printf 'started\0%s\0%s\0' "$__eukhe_job" "$__eukhe_group" >&4
  exec 3<&- 4>&- 5<&- 6>&- 7<&-
  # The directory may have gone, come back, or another taken its path,
  # since the restore: bash's `cd` to the path, now.
  __eukhe_cwd=${__eukhe_lost_cwd:-$PWD}
  if builtin cd -- "$__eukhe_cwd" 2>/dev/null; then
    builtin unset __eukhe_lost_cwd
  else
    __eukhe_lost_cwd=$__eukhe_cwd
  fi
  # Gone: the command does not run anywhere else. Plain bash's `cd`
  # error, status 1, the state as it was; the kernel adds the notice.
  if [[ -n ${__eukhe_lost_cwd-} ]]; then
    if [[ ! -e $__eukhe_lost_cwd ]]; then
      __eukhe_why='No such file or directory'
    elif [[ ! -d $__eukhe_lost_cwd ]]; then
      __eukhe_why='Not a directory'
    else
      __eukhe_why='Permission denied'
    fi
    builtin printf 'bash: cd: %s: %s\n' "$__eukhe_lost_cwd" "$__eukhe_why" >&2
    builtin printf 'skip\0cwd\0%s\0status\0\0%s\0' "$__eukhe_lost_cwd" 1 >"$__eukhe_state"
    builtin exit 1
  fi
  # The command's syntax check (below), defined before the traps are set.
  # It parses in this shell, without a fork, when nothing can see it (a
  # function whose `local -` ends the `set -n` as it returns); else in a
  # subshell: a DEBUG, ERR or RETURN trap (the restore says so), function
  # or error tracing and extdebug would see the call, and under `set -e`
  # or POSIX mode a failed parse would end this shell.
  if [[ -n ${__eukhe_parse_apart-} ]]; then
    __eukhe_parse() {
      builtin unset -f __eukhe_parse
      ( builtin eval "\\builtin set -n
$__eukhe_cmd" )
    }
  else
    __eukhe_parse() {
      builtin unset -f __eukhe_parse
      builtin local -
      if [[ $- == *[eET]* || :$SHELLOPTS: == *:posix:* || :$BASHOPTS: == *:extdebug:* ]]; then
        ( builtin eval "\\builtin set -n
$__eukhe_cmd" )
      else
        builtin eval "\\builtin set -n
$__eukhe_cmd"
      fi
    }
  fi
  . "$__eukhe_late"
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
    builtin export -n __eukhe_so0 __eukhe_bo0 __eukhe_x __eukhe_off __eukhe_cmd
  } 2>/dev/null
  # A command whose parse fails here (a syntax error, or words that parse
  # only once an earlier line has run, as `shopt -s extglob` makes them)
  # runs as `bash -c` runs it, in a bash over the restore with the options
  # it begins with; its state stays as it was. The parse executes nothing
  # after its `set -n` (quoted: never the user's alias). Its argument
  # leaves `$_` as it was.
  if ! { __eukhe_parse __eukhe_cmd; } 2>/dev/null; then
    builtin printf 'skip\0\0\0' >"$__eukhe_state"
    IFS=: builtin read -r -a __eukhe_names <<<"$__eukhe_so0"
    __eukhe_opts=()
    for __eukhe_n in "${__eukhe_names[@]}"; do __eukhe_opts+=(-o "$__eukhe_n"); done
    BASH_ENV=$__eukhe_restore builtin exec -a bash "$BASH" --norc --noprofile \
      "${__eukhe_opts[@]}" -c "$__eukhe_cmd" <"${__eukhe_in:-/dev/null}"
  fi
  if [[ $__eukhe_off == *v* ]]; then builtin printf '%s\n' "$__eukhe_cmd" >&2; fi
}
