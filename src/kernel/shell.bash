# The rc file of an interactive shell run (`eukhe attach S --shell`): a
# `bash -i` that a terminal job's shell starts on the job's terminal. It
# restores the session's state (the job's own restore and late scripts),
# then marks each command typed at its prompt as terminals' shell
# integration does (OSC 133 C before the command's output, OSC 133 D with
# its status after it, the command's text in OSC 633 E before its start), and
# writes the state each command leaves (the job's capture, run in a
# subshell) to a checkpoint file before its prompt is shown, which the
# kernel merges into the session's state (`jobs/shell.rs`).
#
# From the job's shell, in the environment: __eukhe_restore,
# __eukhe_late, __eukhe_checkpoint, __eukhe_so_outer and __eukhe_bo_outer
# (that shell's SHELLOPTS and BASHOPTS), __eukhe_had (which of
# __eukhe_interactive_names the session itself has).
builtin export -n __eukhe_restore __eukhe_late __eukhe_checkpoint \
  __eukhe_so_outer __eukhe_bo_outer __eukhe_had
. "$__eukhe_restore"
. "$__eukhe_late"
# The late script keeps a non-interactive shell's options; a person's shell
# has line editing, history and job control (none is kept: the capture
# leaves them out).
builtin set -o history -o monitor
[[ -o vi ]] || builtin set -o emacs
# Variables interactive bash sets itself: not the session's unless it had
# them or a command here changed them.
__eukhe_interactive_names=(PS1 PS2 HISTFILE HISTSIZE HISTFILESIZE MAILCHECK)
builtin declare -A __eukhe_given
__eukhe_first=y
__eukhe_user_prompt=${PROMPT_COMMAND-}
PS0='${__eukhe_ran:=}$(__eukhe_preexec)'"${PS0-}"
PROMPT_COMMAND=__eukhe_precmd

# The typed command's text, escaped for a mark: `\`, `;` and control
# characters as `\xNN`.
__eukhe_mark_text() {
  __eukhe_t=$(HISTTIMEFORMAT= builtin history 1)
  __eukhe_t=${__eukhe_t#*[0-9]  }
  __eukhe_t=${__eukhe_t//\\/\\x5c}
  __eukhe_t=${__eukhe_t//;/\\x3b}
  __eukhe_t=${__eukhe_t//$'\n'/\\x0a}
  __eukhe_t=${__eukhe_t//$'\r'/\\x0d}
  __eukhe_t=${__eukhe_t//$'\t'/\\x09}
  __eukhe_t=${__eukhe_t//$'\e'/\\x1b}
  __eukhe_t=${__eukhe_t//$'\a'/\\x07}
}

# In PS0's command substitution, after a command line is read and before
# it runs.
__eukhe_preexec() {
  __eukhe_mark_text
  builtin printf '\e]633;E;%s\a\e]133;C\a' "$__eukhe_t"
}

__eukhe_status() { builtin return "$1"; }

# Before each prompt, and at `exit`: after a command (PS0 set
# `__eukhe_ran`), its state to the checkpoint file (whole, by a rename),
# then its end mark with status `__eukhe_s`.
__eukhe_save() {
  if [[ -n ${__eukhe_ran+x} ]]; then
    builtin unset __eukhe_ran
    __eukhe_state=$__eukhe_checkpoint.new
    (
      # What is this shell's and not the session's.
      builtin unset -f __eukhe_mark_text __eukhe_preexec __eukhe_status __eukhe_precmd \
        __eukhe_save
      [[ -n $__eukhe_own_exit ]] && builtin unset -f exit
      PROMPT_COMMAND=$__eukhe_user_prompt
      [[ -z $PROMPT_COMMAND ]] && builtin unset PROMPT_COMMAND
      PS0=${PS0#'${__eukhe_ran:=}$(__eukhe_preexec)'}
      [[ -z $PS0 ]] && builtin unset PS0
      for __eukhe_n in "${__eukhe_interactive_names[@]}"; do
        if [[ " $__eukhe_had " != *" $__eukhe_n "* &&
          ${!__eukhe_n-$'\1'} == "${__eukhe_given[$__eukhe_n]}" ]]; then
          builtin unset "$__eukhe_n"
        fi
      done
      [[ :$__eukhe_so_outer: == *:histexpand:* ]] || builtin set +H
      [[ :$__eukhe_bo_outer: == *:expand_aliases:* ]] || builtin shopt -u expand_aliases
      __eukhe_so0= __eukhe_bo0=
@CAPTURE@
    )
    builtin command -p mv -f -- "$__eukhe_state" "$__eukhe_checkpoint" 2>/dev/null
    builtin printf '\e]133;D;%s\a' "$__eukhe_s"
  fi
}

# Before each prompt.
__eukhe_precmd() {
  __eukhe_s=$?
  if [[ -n $__eukhe_first ]]; then
    __eukhe_first=
    for __eukhe_n in "${__eukhe_interactive_names[@]}"; do
      __eukhe_given[$__eukhe_n]=${!__eukhe_n-$'\1'}
    done
  fi
  __eukhe_save
  if [[ -n $__eukhe_user_prompt ]]; then
    __eukhe_status "$__eukhe_s"
    builtin eval "$__eukhe_user_prompt"
  fi
  __eukhe_status "$__eukhe_s"
}

# `exit` after a command on the same line (`cd /tmp; exit`) leaves before
# the next prompt: what the line changed is saved first. Only this shell's
# own exit (a subshell's state is not the session's), and only when the
# session has no `exit` function of its own.
__eukhe_own_exit=
if ! builtin declare -F exit >/dev/null; then
  __eukhe_own_exit=y
  exit() {
    __eukhe_s=$?
    (($#)) || builtin set -- "$__eukhe_s"
    # The line's status is the one it exits with.
    [[ $1 =~ ^-?[0-9]+$ ]] && __eukhe_s=$(($1 & 255))
    [[ $BASHPID == "$$" ]] && __eukhe_save
    builtin exit "$@"
  }
fi
