#!/usr/bin/env bash
# sep_host_check.sh [ATTNC]: the separable-mask hooks attnc emits, compiled for
# the host and checked against the masks as written (tests/host/sep_host_check.cpp).
# No GPU needed; the checks run under AddressSanitizer with the workspace
# sized by the runtime's own sep_workspace_bytes. Run from the repository root.
set -eu
attnc=${1:-build/attnc}
lib=$(dirname "$attnc")/libattn.a # sep_workspace_bytes, the runtime's layout
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/docqk.attn" <<'EOF'
attention docqk {
  input q : bf16[B, H, Sq, 128];
  input k : bf16[B, H, Skv, 128];
  input v : bf16[B, H, Skv, 128];
  input dq : i32[B, Sq];
  input dk : i32[B, Skv];
  s = mask((q @ k^T) * 0.088, dk[b, j] == dq[b, i]);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 128];
}
EOF
cat >"$tmp/posf.attn" <<'EOF'
attention posf {
  input q : bf16[B, H, Sq, 64];
  input k : bf16[B, H, Skv, 64];
  input v : bf16[B, H, Skv, 64];
  input pq : f32[B, H, Sq];
  input pk : f32[B, Skv];
  s = mask((q @ k^T) * 0.125, pk[b, j] <= pq[b, h, i] + 1.0 && i >= 3);
  o = softmax(s) @ v;
  output o : f32[B, H, Sq, 64];
}
EOF

fail=0
hooks_of() { # hooks_of FILE GRAPH: the graph's emitted hooks in $tmp/GRAPH.inc
  "$attnc" emit --brief "$1" --arch sm_90a >"$tmp/$2.cu"
  # The graph's namespace from its first line to the template's text.
  sed -n "/^namespace graph_$2 {/,/^\/\* \[the text of templates\/fwd_/p" "$tmp/$2.cu" |
    sed '$d' >"$tmp/$2.inc"
}
run_case() { # run_case N FILE GRAPH
  hooks_of "$2" "$3"
  g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -Iabi -Itests/host -DSEP_CASE="$1" \
    -DSEP_NS="graph_$3" -DSEP_HOOKS="\"$tmp/$3.inc\"" -o "$tmp/check$1" tests/host/sep_host_check.cpp \
    "$lib" -ldl -lm -lpthread
  "$tmp/check$1" || fail=1
}
run_case 1 examples/document.attn document
run_case 2 "$tmp/docqk.attn" docqk
run_case 3 "$tmp/posf.attn" posf
run_case 4 examples/chunked.attn chunked

# Affine masks whose i32 arithmetic can wrap (tests/host/affine_host_check.cpp).
cat >"$tmp/wrap1.attn" <<'EOF'
attention wrap1 {
  input q : bf16[B, H, Sq, 64];
  input k : bf16[B, H, Skv, 64];
  input v : bf16[B, H, Skv, 64];
  scalar w : i32;
  s = mask((q @ k^T) * 0.125, j > i - w && j <= i + w);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 64];
}
EOF
cat >"$tmp/wrap2.attn" <<'EOF'
attention wrap2 {
  input q : bf16[B, H, Sq, 64];
  input k : bf16[B, H, Skv, 64];
  input v : bf16[B, H, Skv, 64];
  scalar w : i32;
  scalar c : i32;
  s = mask((q @ k^T) * 0.125, 3 * j - 1000000000 * (i - j) <= w * 2 + c && -(j - c) < i);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 64];
}
EOF
run_affine() { # run_affine N FILE GRAPH
  hooks_of "$2" "$3"
  g++ -std=c++17 -O1 -g -w -fsanitize=address,undefined -Iabi -Itests/host -DAFF_CASE="$1" \
    -DAFF_NS="graph_$3" -DAFF_HOOKS="\"$tmp/$3.inc\"" -o "$tmp/aff$1" tests/host/affine_host_check.cpp
  "$tmp/aff$1" || fail=1
}
# Disjunctions of affine conjunctions (StreamingLLM: sink tokens or a
# window), classified per alternative: the same three properties.
cat >"$tmp/stream1.attn" <<'EOF'
attention stream1 {
  input q : bf16[B, H, Sq, 64];
  input k : bf16[B, H, Skv, 64];
  input v : bf16[B, H, Skv, 64];
  scalar n : i32;
  scalar w : i32;
  s = mask((q @ k^T) * 0.125, j <= i && (j < n || i - j < w));
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 64];
}
EOF
cat >"$tmp/stream2.attn" <<'EOF'
attention stream2 {
  input q : bf16[B, H, Sq, 64];
  input k : bf16[B, H, Skv, 64];
  input v : bf16[B, H, Skv, 64];
  scalar n : i32;
  scalar w : i32;
  s = mask((q @ k^T) * 0.125, j < n || (j <= i && i - j < w) || j == i + 3 * w);
  o = softmax(s) @ v;
  output o : bf16[B, H, Sq, 64];
}
EOF
run_affine 1 "$tmp/wrap1.attn" wrap1
run_affine 2 "$tmp/wrap2.attn" wrap2
run_affine 3 "$tmp/stream1.attn" stream1
run_affine 4 "$tmp/stream2.attn" stream2
exit $fail
