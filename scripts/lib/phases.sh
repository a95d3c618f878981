# Sourced by the scripts that run long: `phase NAME CMD...` runs CMD and prints how long it took,
# and phase_summary prints every phase of the run with its duration (the figures README.md quotes).
# A script run by another one adds its phases to the caller's summary (KONN_PHASES_FILE) and
# prints none of its own.
if [ -z "${KONN_PHASES_FILE:-}" ]; then
  KONN_PHASES_FILE=$(mktemp)
  KONN_PHASES_OWNER=$$
  export KONN_PHASES_FILE
fi

phase() {
  local name=$1 start=$SECONDS status=0
  shift
  echo "== $name"
  "$@" || status=$?
  local took=$((SECONDS - start))
  printf '%s\t%d\n' "$name" "$took" >>"$KONN_PHASES_FILE"
  echo "== $name: $(format_duration "$took")$([ "$status" -eq 0 ] || echo ", failed (exit $status)")"
  return "$status"
}

format_duration() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

phase_summary() {
  [ "${KONN_PHASES_OWNER:-}" = "$$" ] || return 0
  local total=0 name took
  echo "== time per phase"
  while IFS=$'\t' read -r name took; do
    printf '   %-28s %s\n' "$name" "$(format_duration "$took")"
    total=$((total + took))
  done <"$KONN_PHASES_FILE"
  printf '   %-28s %s\n' "sum" "$(format_duration "$total")"
  rm -f "$KONN_PHASES_FILE"
}
