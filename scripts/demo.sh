#!/usr/bin/env bash
# The main job, on generated data: time series of several thousand basins
# (daily rows of 16 float32 features, 10 to 30 years each, about 1.4 GiB),
# packed into a dataset, inspected and verified, with the speed of each step.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${STOKER_BUILD:-build}
DATA=${DEMO_DATA:-demo-data}
BASINS=${DEMO_BASINS:-3000}
mkdir -p "$DATA"

secs() { date +%s.%N; }
el() { echo "$2 - $1" | bc -l | xargs printf '%.2f'; }

if [ ! -f "$DATA/series.done" ] || [ "$(cat "$DATA/series.done")" != "$BASINS" ]; then
    echo "== generating $BASINS basins of daily series (one .npy file each)"
    rm -rf "$DATA/series"
    "$B/stoker-gen" series "$DATA/series" --entities "$BASINS" --min-rows 3650 \
        --max-rows 10950 --features 16 --seed 7
    echo "$BASINS" >"$DATA/series.done"
fi
bytes=$(du -sb "$DATA/series" | cut -f1)
echo "== input: $(ls "$DATA/series" | wc -l) files, $((bytes / 1048576)) MiB"

echo "== stoker pack"
t0=$(secs)
"$B/stoker" pack --from npy "$DATA/series" -o "$DATA/basins.stk" --field x --force
t1=$(secs)
echo
echo "== stoker inspect"
"$B/stoker" inspect "$DATA/basins.stk"
echo
echo "== stoker verify"
t2=$(secs)
"$B/stoker" verify "$DATA/basins.stk"
t3=$(secs)
echo
echo "== stoker cat (record 42, first rows)"
"$B/stoker" cat "$DATA/basins.stk" 42 --limit 48
echo
mib=$(echo "$bytes / 1048576" | bc -l)
printf '== summary: packed %.0f MiB in %s s (%.0f MiB/s, fsync included); verified in %s s (%.0f MiB/s)\n' \
    "$mib" "$(el "$t0" "$t1")" "$(echo "$mib / ($t1 - $t0)" | bc -l)" \
    "$(el "$t2" "$t3")" "$(echo "$mib / ($t3 - $t2)" | bc -l)"
