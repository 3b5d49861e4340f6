#!/bin/sh
# The native CLI on "kind": "transformer" case documents (ctest cli_transformer_cases): golden
# cases of every kind of config match PyTorch (exit 0) and print {"logits", "loss", "hooks"}; a
# wrong expected loss or hook is a mismatch (exit 1); malformed documents exit 2 with one line
# naming the JSON path (or the state_dict key); the attention-only flags are refused.
#   cli_transformer_test.sh CLI GOLDEN_DIR
set -u
cli=$1
dir=$2/transformer
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# Pre/post/none norms, learned/sinusoidal/no positions, attention-only and MLP, batched and
# unbatched, with and without targets and head gates, T = 1 and T = max_len.
cases=0
for name in pre-learned-attn-only-l1-h1-b2 none-learned-gelu-mlp-l2-h2-unbatched \
    post-sinusoidal-relu-nobias-mlp-l3-h3-gates-unbatched pre-learned-gelu-mlp-l2-h4-gates-b2 \
    none-none-gelu-mlp-l2-h2-b3 odd-d5-pre-sinusoidal-gelu-mlp-l1-h1-b2 \
    post-sinusoidal-attn-only-l2-h2-t1-b3 induction-lab-pre-learned-attn-only-l2-h2-b2; do
  file=$dir/$name.json
  out=$("$cli" run "$file" --check 2>"$tmp/err")
  code=$?
  [ $code -eq 0 ] || bad "$name: exit $code: $(cat "$tmp/err")"
  grep -q "^headscope: $file: matches expected (max relative error [0-9.e+-]* over [0-9]* tensors" "$tmp/err" ||
    bad "$name: $(cat "$tmp/err")"
  case $out in '{"logits": [['*'}}') ;; *) bad "$name: output $(echo "$out" | cut -c1-80)" ;; esac
  echo "$out" | grep -q ', "hooks": {"hook_embed": \[' || bad "$name: no hooks in the output"
  # "loss" exactly when the case has targets.
  if grep -q '"targets"' "$file"; then
    echo "$out" | grep -q '\]\]*, "loss": [0-9][0-9.e+-]*, "hooks"' || bad "$name: no loss printed"
  elif echo "$out" | grep -q '"loss"'; then
    bad "$name: a loss without targets"
  fi
  cases=$((cases + 1))
done
[ "$cases" -ge 8 ] || bad "only $cases cases"

# Every hook of the file's expected section is printed, in the file's (the reference's) order.
file=$dir/pre-learned-attn-only-l1-h1-b2.json
want=$(grep -o '"[a-z0-9_.]*hook_[a-z_]*": \[\|"logits": \[' "$file" | sed -n '2,$p' | tr -d '\n')
got=$("$cli" run "$file" | grep -o '"[a-z0-9_.]*hook_[a-z_]*": \[\|"logits": \[' | sed -n '2,$p' | tr -d '\n')
[ -n "$want" ] && [ "$got" = "$want" ] || bad "hook names: got $got, want $want"

# Mismatches exit 1 and name what differs.
sed 's/^  "loss": 1.8892760526172523,/  "loss": 1.9,/' "$file" > "$tmp/loss.json"
"$cli" run "$tmp/loss.json" --check >/dev/null 2>"$tmp/err"
code=$?
[ $code -eq 1 ] && grep -q 'MISMATCH (.*): loss: got 1.889276' "$tmp/err" || bad "wrong loss: exit $code: $(cat "$tmp/err")"
"$cli" run "$tmp/loss.json" --check --tolerance 0.02 >/dev/null 2>&1 || bad "--tolerance 0.02 allows the loss"
sed 's/"hook_embed": \[\[\[1.0446268320083618,/"hook_embed": [[[1.5,/' "$file" > "$tmp/hook.json"
cmp -s "$file" "$tmp/hook.json" && bad "hook_embed was not edited"
"$cli" run "$tmp/hook.json" --check >/dev/null 2>"$tmp/err"
code=$?
[ $code -eq 1 ] && grep -q 'MISMATCH (.*): hooks.hook_embed\[0\]: got 1.04462' "$tmp/err" ||
  bad "wrong hook_embed: exit $code: $(cat "$tmp/err")"

# Malformed documents: exit 2, nothing on stdout, one line naming the path. Each is the golden
# file with one edit (sed expression, then the message expected after "headscope: FILE: ").
n=0
while IFS='|' read -r edit message; do
  case $edit in ''|'#'*) continue ;; esac
  n=$((n + 1))
  sed "$edit" "$file" > "$tmp/bad$n.json"
  cmp -s "$file" "$tmp/bad$n.json" && { bad "edit '$edit' changed nothing"; continue; }
  out=$("$cli" run "$tmp/bad$n.json" 2>"$tmp/err")
  code=$?
  err=$(cat "$tmp/err")
  [ $code -eq 2 ] || bad "'$edit': exit $code: $err"
  [ -z "$out" ] || bad "'$edit': printed a result"
  [ "$(wc -l < "$tmp/err")" -eq 1 ] || bad "'$edit': not one line: $err"
  case $err in "headscope: $tmp/bad$n.json: $message"*) ;; *) bad "'$edit': $err (want $message)" ;; esac
done <<'EOF'
s/"kind": "transformer"/"kind": "Transformer"/|PARSE_ERROR: kind: expected one of "mha", "transformer"
s/"kind": "transformer"/"kind": 7/|PARSE_ERROR: kind: expected one of "mha", "transformer"
s/"d_model": 4, //|PARSE_ERROR: config.d_model: required, expected an integer in [1, 16777216]
s/"n_heads": 1/"n_heads": 3/|PARSE_ERROR: config.n_heads: d_model (4) must be divisible by n_heads (3)
s/"n_layers": 1/"n_layers": 0/|PARSE_ERROR: config.n_layers: expected an integer in [1, 256], got number 0
s/"norm": "pre"/"norm": "Pre"/|PARSE_ERROR: config.norm: expected one of "pre", "post", "none", got string "Pre"
s/"ln_eps": 1e-05/"ln_eps": 0/|PARSE_ERROR: config.ln_eps: expected a finite number > 0
s/"bias": true/"bias": true, "seed": 1/|PARSE_ERROR: config.seed: unknown key
s/"tokens": \[\[1,5,2,0,5\]/"tokens": [[1,5,2,0,7]/|PARSE_ERROR: inputs.tokens[0][4]: expected a token id in [0, 6] (config.vocab_size 7), got 7
s/"tokens": \[\[1,5,2,0,5\]/"tokens": [[1,5,-1,0,5]/|PARSE_ERROR: inputs.tokens[0][2]: expected a token id in [0, 6]
s/"tokens": \[\[1,5,2,0,5\],\[4,4,2,6,1\]/"tokens": [[1,5,2,0,5],[4,4,2.5,6,1]/|PARSE_ERROR: inputs.tokens[1][2]: expected an integer token id, got number 2.5
s/"tokens": \[\[1,5,2,0,5\],\[4,4,2,6,1\]/"tokens": [[1,5,2,0,5],[4,4,2,6]/|PARSE_ERROR: inputs.tokens[1]: expected 5 elements like its siblings, got 4
s/"max_len": 8/"max_len": 4/|PARSE_ERROR: inputs.tokens: T = 5 tokens, more than config.max_len = 4
s/"targets": \[\[5,2,0,5,-100\]/"targets": [[5,2,0,5,9]/|PARSE_ERROR: inputs.targets[0][4]: expected -100 (not counted) or a token id in [0, 6]
s/"targets": \[\[5,2,0,5,-100\],\[4,2,6,1,-100\]\]/"targets": [[5,2,0,5,-100]]/|PARSE_ERROR: inputs.targets: expected the shape of inputs.tokens, [2, 5], got [1, 5]
s/"targets": \[\[5,2,0,5,-100\],\[4,2,6,1,-100\]\]/"targets": [[-100,-100,-100,-100,-100],[-100,-100,-100,-100,-100]]/|PARSE_ERROR: inputs.targets: every target is -100
s/"targets"/"target"/|PARSE_ERROR: inputs.target: unknown key
s/^  "loss": /  "lost": /|PARSE_ERROR: expected.lost: unknown key
s/"blocks.0.attn.hook_pattern"/"blocks.1.attn.hook_pattern"/|PARSE_ERROR: expected.hooks.blocks.1.attn.hook_pattern: not a hook of this config
s/"vocab_size": 7/"vocab_size": 8/|SHAPE_MISMATCH: state_dict['tok_embed.weight']: expected shape [8, 4], got [7, 4]
s/"unembed.bias"/"unembed.bias2"/|UNKNOWN_PARAMETER: state_dict['unembed.bias2']: unknown key for this config
EOF
[ "$n" -ge 20 ] || bad "only $n malformed documents"

# The attention-only flags are refused for a transformer case; the output limit applies.
for flag in --head-stats '--head-gates 1' --reference; do
  # shellcheck disable=SC2086
  err=$("$cli" run "$file" $flag 2>&1 >/dev/null)
  code=$?
  [ $code -eq 2 ] && case $err in "headscope: $file: ${flag%% *} applies to attention cases only, and this is a \"kind\": \"transformer\" case"*) true ;; *) false ;; esac ||
    bad "$flag: exit $code: $err"
done
err=$("$cli" run "$file" --max-output-bytes 1000 2>&1 >/dev/null)
code=$?
[ $code -eq 2 ] && case $err in "headscope: $file: RESOURCE_EXHAUSTED: result: its JSON text could take "*" bytes (logits [2, 5, 7], 14 hooks), more than the limit of 1000 bytes (--max-output-bytes raises it)") true ;; *) false ;; esac ||
  bad "--max-output-bytes 1000: exit $code: $err"
"$cli" run "$file" --max-output-bytes 100000 >/dev/null || bad "--max-output-bytes 100000"

[ $fail -eq 0 ] && echo "ok: $cases golden transformer cases, $n malformed documents, flags, output bound"
exit $fail
