#!/usr/bin/env bash
# restartable.sh DIR CMD...: runs CMD (a cluster's kube-apiserver) and keeps its pid in DIR/pid.
# A test stops it by creating DIR/down and killing that pid (flotilla-testenv's
# `TestEnv::kill_apiserver`), and brings it back by removing DIR/down (`restore_apiserver`): the
# command is then started again with the same arguments, as a restarted static Pod would be.
# Any other exit of CMD ends this script with status 1, so start.sh's supervisor ends the
# environment as for any other component.
set -u
dir="$1"
shift
mkdir -p "$dir"
child=""
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; exit 0' TERM INT
while true; do
  while [ -e "$dir/down" ]; do sleep 0.1; done
  setpriv --pdeathsig KILL -- "$@" &
  child=$!
  echo "$child" >"$dir/pid"
  wait "$child"
  [ -e "$dir/down" ] || exit 1
done
