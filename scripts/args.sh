# Sourced by the repository's shell scripts for their command lines: help_text prints the
# calling script's header comment (its help), no_arguments refuses arguments the script does
# not take, after answering -h/--help.
#   source "$(dirname "$0")/args.sh"; no_arguments "$@"     # a script that takes none
help_text() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
}
no_arguments() {
  case ${1:-} in
    "") return 0 ;;
    -h|--help) help_text; exit 0 ;;
    *) echo "$(basename "$0"): takes no arguments, got '$*' (--help says what it does)" >&2; exit 2 ;;
  esac
}
