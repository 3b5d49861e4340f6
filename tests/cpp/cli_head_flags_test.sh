#!/bin/sh
# The native CLI's --head-gates and --head-stats (ctest cli_head_flags): every case of
# tests/golden/gates matches PyTorch's gated output with its gates from head_gates.txt (exit 0,
# fast and reference paths) and not without them (exit 1); --head-stats prints the seed's
# statistics; bad gate lists and a wrong count exit 2 naming --head-gates; --max-output-bytes
# counts the statistics.
#   cli_head_flags_test.sh CLI GOLDEN_DIR
set -u
cli=$1
golden=$2
gates_dir=$golden/gates
seed=$golden/seed-worked-example.json
fail=0
bad() { echo "FAIL: $*"; fail=1; }

cases=0
while read -r file gates; do
  case $file in ''|'#'*) continue ;; esac
  list=$(echo "$gates" | tr ' ' ',')
  "$cli" run "$gates_dir/$file" --check --head-gates "$list" >/dev/null || bad "$file --head-gates $list"
  "$cli" run "$gates_dir/$file" --check --reference --head-gates="$list" --head-stats >/dev/null ||
    bad "$file --reference --head-gates=$list --head-stats"
  "$cli" run "$gates_dir/$file" --check >/dev/null 2>&1
  [ $? -eq 1 ] || bad "$file matches without its gates"
  cases=$((cases + 1))
done < "$gates_dir/head_gates.txt"
[ "$cases" -ge 5 ] || bad "only $cases gated cases"

# The seed: unbatched, two heads; the values tests/js/stats.test.js works out by hand.
out=$("$cli" run "$seed" --head-stats) || bad "--head-stats exit $?"
echo "$out" | grep -q '"weights": \[\[\[.*\]\]\], "head_stats": {"entropy": \[0\.92106[0-9]*, 0\.84201[0-9]*\], "distance": \[0\.676248[0-9]*, 0\.714783[0-9]*\], "max_weight": \[0\.523380[0-9]*, 0\.608426[0-9]*\]}}$' ||
  bad "seed head_stats: $out"
plain=$("$cli" run "$seed")
case $out in "${plain%\}}, \"head_stats\": "*) ;; *) bad "--head-stats changed the output or weights" ;; esac
"$cli" run "$seed" --head-gates nan,1 | grep -q '"output": \[\["nan", "nan"' || bad "a nan gate"

for list in x 1, ,1 '1;2' 0x10,1 infinity,1 1e,2 ''; do
  err=$("$cli" run "$seed" --head-gates "$list" 2>&1 >/dev/null)
  code=$?
  [ $code -eq 2 ] || bad "--head-gates '$list': exit $code"
  echo "$err" | head -1 | grep -q '^headscope: --head-gates: expected comma-separated numbers' ||
    bad "--head-gates '$list': $err"
done
err=$("$cli" run "$seed" --head-gates 1,0,1 2>&1 >/dev/null)
code=$?
[ $code -eq 2 ] && [ "$err" = "headscope: $seed: --head-gates: expected 2 numbers (one per head), got 3" ] ||
  bad "a wrong gate count: exit $code: $err"

# The seed's result is 594 bytes at most, 772 with the statistics.
"$cli" run "$seed" --head-stats --max-output-bytes 771 >/dev/null 2>&1
[ $? -eq 2 ] || bad "--max-output-bytes 771 with --head-stats"
"$cli" run "$seed" --head-stats --max-output-bytes 772 >/dev/null || bad "--max-output-bytes 772 with --head-stats"
"$cli" run "$seed" --max-output-bytes 771 >/dev/null || bad "--max-output-bytes 771 without --head-stats"

[ $fail -eq 0 ] && echo "ok: $cases gated cases, --head-stats, bad lists, output bound"
exit $fail
