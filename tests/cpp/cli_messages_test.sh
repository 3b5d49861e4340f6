#!/bin/sh
# The native CLI's messages and numeric flags (ctest cli_messages): a state_dict key or a file
# name with control characters (ESC, newline, DEL, C1, bidi overrides) is written with escapes,
# so each message is one line that drives no terminal; --tolerance takes a decimal number only
# (0x10 is not 16, inf is not a tolerance), with or without '='; byte counts take digits only.
# web/lib/cli.js does the same (tests/js/cli.test.js checks both CLIs when this one is built).
#   cli_messages_test.sh CLI GOLDEN_DIR DATA_DIR
set -u
cli=$1
seed=$2/seed-worked-example.json
wrong=$3/wrong-expected.json   # max relative error 0.00367
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
esc=$(printf '\033')
nl='
'

# One line, no byte a terminal acts on (C0 but the final newline, DEL, C1's UTF-8 lead 0xC2 0x80-0x9F).
one_line() {  # one_line FILE WHAT
  [ "$(wc -l < "$1")" -eq 1 ] || bad "$2: $(wc -l < "$1") lines: $(cat "$1")"
  LC_ALL=C tr -d '\n' < "$1" | LC_ALL=C grep -q "$(printf '[\001-\037\177]')" && bad "$2: a raw control character"
  LC_ALL=C grep -q "$(printf '\302[\200-\237]')" "$1" && bad "$2: a raw C1 control"
  LC_ALL=C grep -q "$(printf '\342\200[\256\252-\255]')" "$1" && bad "$2: a raw bidi override"
  return 0
}

# A key that would clear the screen and forge a second "ok" line; one with BEL, DEL, C1 CSI,
# U+202E, U+2066 and U+2028 (written as JSON escapes in the case file).
# The message shows the key as the core quotes a caller's text (QuoteInput: every character it
# hides as \uXXXX, a newline included).
n=0
for key in 'w\u001b[2J\u001b[H\nheadscope: seed.json: ok, matches expected' 'k\u0007\u007f\u009b31m\u202eevil\u2066\u2028'; do
  n=$((n + 1))
  { head -3 "$seed"; printf '"state_dict": {"%s": [1],\n' "$key"; tail -n +5 "$seed"; } > "$tmp/key$n.json"
  "$cli" run "$tmp/key$n.json" --check > "$tmp/out" 2> "$tmp/err$n"
  code=$?
  [ $code -eq 2 ] || bad "key $n: exit $code: $(cat "$tmp/err$n")"
  [ -s "$tmp/out" ] && bad "key $n: output on stdout"
  one_line "$tmp/err$n" "key $n"
  case $n in
    1) shown='w\u001b[2J\u001b[H\u000aheadscope: seed.json: ok, matches expected' ;;
    *) shown='k\u0007\u007f\u009b31m\u202eevil\u2066\u2028' ;;
  esac
  grep -qF "$shown" "$tmp/err$n" || bad "key $n escaped: $(cat "$tmp/err$n")"
done

# A file name with a newline and ESC: the --check line is still one line.
named="$tmp/seed${nl}${esc}[31mred.json"
cp "$seed" "$named"
"$cli" run "$named" --check > /dev/null 2> "$tmp/err"
code=$?
[ $code -eq 0 ] || bad "file name: exit $code"
one_line "$tmp/err" "file name"
grep -qF 'seed\n\u001b[31mred.json: matches expected' "$tmp/err" || bad "file name escaped: $(cat "$tmp/err")"
# Printable text beyond ASCII is kept.
cp "$seed" "$tmp/café.json"
"$cli" run "$tmp/café.json" --check 2>&1 >/dev/null | grep -qF "café.json: matches expected" || bad "café.json"

# --tolerance: decimal only; the message names the flag, what it takes and what it got.
expected='headscope: --tolerance: expected a finite non-negative decimal number (such as 0.001 or 1e-4), got'
for text in 0x10 0X10 0x1p4 inf infinity nan -1 1e999 1e . 1_0 ' 1' '1 ' ''; do
  for form in separate equals; do
    if [ $form = separate ]; then
      "$cli" run "$wrong" --check --tolerance "$text" > "$tmp/out" 2> "$tmp/err"
    else
      "$cli" run "$wrong" --check "--tolerance=$text" > "$tmp/out" 2> "$tmp/err"
    fi
    code=$?
    [ $code -eq 2 ] || bad "--tolerance '$text' ($form): exit $code (0x10 used to be 16)"
    [ -s "$tmp/out" ] && bad "--tolerance '$text' ($form): output on stdout"
    [ "$(head -1 "$tmp/err")" = "$expected \"$text\"" ] || bad "--tolerance '$text' ($form): $(head -1 "$tmp/err")"
  done
done
"$cli" run "$wrong" --check --tolerance 2> "$tmp/err" > /dev/null
[ "$(head -1 "$tmp/err")" = "$expected nothing" ] || bad "--tolerance with nothing: $(head -1 "$tmp/err")"
for text in 0.01 1e-2 1E-2 .01 10e-3 +0.01 16; do
  "$cli" run "$wrong" --check --tolerance "$text" > /dev/null 2>&1 || bad "--tolerance $text: exit $?"
  "$cli" run "$wrong" --check "--tolerance=$text" > /dev/null 2>&1 || bad "--tolerance=$text: exit $?"
done
for text in 0.001 1e-3 0; do
  "$cli" run "$wrong" --check --tolerance "$text" > /dev/null 2>&1
  code=$?
  [ $code -eq 1 ] || bad "--tolerance $text: exit $code, expected a mismatch"
done

# Byte counts: digits only, the flag and the text in the message.
for flag in --max-input-bytes --max-output-bytes; do
  for text in 0x10 1e6 +10 ' 10' 10.0 -1; do
    "$cli" run "$seed" "$flag" "$text" > /dev/null 2> "$tmp/err"
    code=$?
    [ $code -eq 2 ] || bad "$flag '$text': exit $code"
    [ "$(head -1 "$tmp/err")" = "headscope: $flag: expected a number of bytes (0 to 2^63), got \"$text\"" ] ||
      bad "$flag '$text': $(head -1 "$tmp/err")"
  done
  "$cli" run "$seed" "$flag=100000" > /dev/null || bad "$flag=100000"
done

[ $fail -eq 0 ] && echo "ok: escaped messages, --tolerance and byte counts"
exit $fail
