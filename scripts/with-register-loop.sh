#!/bin/bash
# A client program for scripts/service-ab.sh (the fifth field of a variant)
# that runs gemmbench beside scripts/register-loop.c on the same daemon:
# with ATK_WAY=register|alloc|bounds in the variant's client environment,
# register-loop (beside this script, as gemmbench is) asks for device memory
# in a loop from before the clients start until gemmbench ends, and appends
# its line to $OUT/atk.txt. Without ATK_WAY it is plain gemmbench. E.g.
#   AB_VARIANTS="base|||$B/gemmd|$B/with-register-loop.sh;reg||ATK_WAY=register|$B/gemmd|$B/with-register-loop.sh"
sock='' prev='' apid=''
for a in "$@"; do
        [ "$prev" = --socket ] && sock=$a
        prev=$a
done
d=$(dirname "$0")
if [ -n "${ATK_WAY:-}" ] && [ -n "$sock" ]; then
        "$d/register-loop" "$sock" 600 "$ATK_WAY" >>"${OUT:-.}/atk.txt" 2>&1 &
        apid=$!
fi
"$d/gemmbench" "$@"
rc=$?
if [ -n "$apid" ]; then
        kill -TERM "$apid"
        wait "$apid"
fi
exit $rc
