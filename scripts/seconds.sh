# Sourced by the scripts that print how long a phase took: now_ns, and seconds_between START END
# (two now_ns readings) as "12.3".
now_ns() { date +%s%N; }
seconds_between() {
  local ms=$((($2 - $1) / 1000000))
  printf '%d.%01d' $((ms / 1000)) $((ms % 1000 / 100))
}
