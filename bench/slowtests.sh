#!/bin/sh
# The N slowest tests (default 20) of a go test -json stream on stdin,
# top-level and subtests alike, with each package's own time last:
#   go test -count=1 -json ./e2e/ ./launch/ | bench/slowtests.sh 30
# Reads what go test printed, so one run can be both kept and sorted:
#   go test -count=1 -json ./... >run.json; bench/slowtests.sh <run.json
set -eu
n=${1:-20}
jq -r 'select(.Action == "pass" or .Action == "fail" or .Action == "skip")
       | select(.Elapsed != null)
       | [.Elapsed, .Action, .Package, (.Test // "(package)")] | @tsv' |
	sort -t "$(printf '\t')" -k1,1 -g -r | head -n "$n" |
	awk -F '\t' '{ printf "%8.2fs  %-4s  %-40s %s\n", $1, $2, $3, $4 }'
