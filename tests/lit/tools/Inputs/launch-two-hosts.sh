#!/bin/sh
# Creates two network namespaces joined by a veth pair (10.78.0.1/24 and
# 10.78.0.2/24), runs `kiln launch --nnodes=2 --nproc-per-node=2` in each
# with its --node-rank and the command "$@", prefixes each launcher's output
# with "node N: " and its exit status, and removes the namespaces.
set -u
a=kiln-lit-a-$$; b=kiln-lit-b-$$
va=kla$$; vb=klb$$
out=$(mktemp -d)
cleanup() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; rm -rf "$out"; }
trap cleanup EXIT
ip netns add $a && ip netns add $b &&
  ip link add $va netns $a type veth peer name $vb netns $b &&
  ip -n $a addr add 10.78.0.1/24 dev $va && ip -n $b addr add 10.78.0.2/24 dev $vb &&
  ip -n $a link set $va up && ip -n $b link set $vb up &&
  ip -n $a link set lo up && ip -n $b link set lo up || exit 1
node() {
  ns=$1; rank=$2; shift 2
  text=$(ip netns exec $ns kiln launch --nnodes=2 --node-rank=$rank \
    --nproc-per-node=2 --master-addr=10.78.0.1 --master-port=29512 -- "$@" 2>&1)
  status=$?
  printf '%s\n' "$text" | sed "s/^/node $rank: /"
  echo "node $rank: exit $status"
}
node $a 0 "$@" > "$out/0" &
node $b 1 "$@" > "$out/1"
wait
cat "$out/0" "$out/1"
