#!/usr/bin/env bash
# Checks that src/ keeps its layers (docs/ARCHITECTURE.md, "Layers"): each
# file of src/L/ includes only headers of L and of the layers L may use,
# and each stk_/stk__ symbol an object of L needs is defined in L or in a
# layer it may use.  Usage: check-layers.sh SOURCE_DIR [BUILD_DIR]
# (without a build directory, only the includes are checked).
set -euo pipefail
src=$1
build=${2:-}
declare -A allowed
while IFS='|' read -r _ layer uses _; do
    layer=$(echo "$layer" | tr -d ' `/')
    [[ "$layer" =~ ^[a-z]+$ ]] || continue
    allowed[$layer]=" $layer $(echo "$uses" | tr -d ',—' | xargs) "
done < <(grep '^| `[a-z]*/` |' "$src/docs/ARCHITECTURE.md")
[ ${#allowed[@]} -gt 0 ] || { echo "check-layers: no layer table found" >&2; exit 1; }

bad=0
for dir in "$src"/src/*/; do
    layer=$(basename "$dir")
    if [ -z "${allowed[$layer]:-}" ]; then
        echo "check-layers: src/$layer/ is not in the layer table" >&2
        bad=1
        continue
    fi
    for f in "$dir"*.[ch] "$dir"*.cu; do
        [ -e "$f" ] || continue
        while read -r up; do
            if [[ "${allowed[$layer]}" != *" $up "* ]]; then
                echo "check-layers: src/$layer/$(basename "$f") includes ../$up/, above or beside $layer" >&2
                bad=1
            fi
        done < <(grep -o '#include "\.\./[a-z]*/' "$f" | sed 's|#include "\.\./||; s|/$||' | sort -u)
    done
done

objdir=${build:+$build/CMakeFiles/stoker_objs.dir/src}
if [ -n "$build" ] && [ -d "$objdir" ]; then
    # The objects of the sources there are now (a build keeps stale ones).
    declare -A def
    objs=()
    for c in "$src"/src/*/*.c; do
        rel=${c#"$src"/src/}
        o="$objdir/$rel.o"
        [ -e "$o" ] || continue
        objs+=("$rel")
        l=${rel%%/*}
        for s in $(nm --defined-only "$o" | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | grep '^stk' || true); do
            def[$s]=$l
        done
    done
    for rel in "${objs[@]}"; do
        l=${rel%%/*}
        for s in $(nm -u "$objdir/$rel.o" | awk '{print $2}' | grep '^stk' || true); do
            d=${def[$s]:-}
            if [ -n "$d" ] && [[ "${allowed[$l]}" != *" $d "* ]]; then
                echo "check-layers: src/$rel calls $s of $d/, above or beside $l" >&2
                bad=1
            fi
        done
    done
fi
[ $bad -eq 0 ] && echo "check-layers: ${#allowed[@]} layers, nothing points up"
exit $bad
