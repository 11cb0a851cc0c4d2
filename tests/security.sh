#!/bin/sh
# security.sh: what dtrain does with the file system and the network.
#
# - No network ports of its own: no socket/bind/listen/accept/connect in
#   src/ and none among dtrain's own undefined symbols (nm -u). The MPI
#   library's connections (Open MPI's out-of-band TCP, its shared memory)
#   belong to the launcher, not to dtrain.
# - Files get the user's umask: with umask 077 every file written
#   (checkpoints, latest, --save-best, --metrics, --timeline, --logdir,
#   --export-keras) is 0600 and every directory 0700; with umask 002, 0664
#   and 0775 (0666/0777 less the umask, no forced modes).
# - Symlinks planted under the temporary names (.latest.tmp,
#   .ckpt-*.h5.tmp.PID for the likely PIDs, the export's NAME.tmp.PID) are
#   never written through: their target is unchanged.
# - latest is only ever a file name of the directory: "../../etc/passwd",
#   an absolute path, or a symlink to another file are refused with a note
#   (without echoing the content) and the newest ckpt-*.h5 is used.
. "$TOP_SRCDIR/tests/common.sh"
T=$TEST_TMP/sec.$$
rm -rf "$T"
mkdir -p "$T"
good=$T/good.h5
"$MKFIXTURE" good "$good" 64 >/dev/null || { echo "mkfixture failed"; exit 99; }
small="--batch-size 8 --epochs 2 --model mlp"

# --- no network code of our own ---
hits=$(grep -rnE '\b(socket|bind|listen|accept4?|connect|getaddrinfo|gethostbyname)[[:space:]]*\(' "$TOP_SRCDIR/src")
syms=$(nm -u "$DTRAIN" 2>/dev/null | grep -wE 'socket|bind|listen|accept4?|connect|getaddrinfo|gethostbyname')
if [ -z "$hits" ] && [ -z "$syms" ] && nm -u "$DTRAIN" >/dev/null 2>&1; then
  pass "no socket, bind, listen, accept or connect in src/ or among dtrain's own symbols"
else
  fail "network calls: $hits $syms"
fi

# --- modes follow the umask ---
for mask in 077 002; do
  w=$T/w$mask
  mkdir -p "$w"
  ( umask $mask
    launch 2 "$DTRAIN" "$good" $small --checkpoint-dir "$w/ck" --save-best "$w/best" --metrics "$w/m.csv" \
      --timeline "$w/tl.json" --logdir "$w/logs" --export-keras "$w/k.weights.h5" >"$T/o" 2>"$T/e" )
  rc=$?
  if [ "$mask" = 077 ]; then f=600 d=700; else f=664 d=775; fi
  files=$(find "$w" -mindepth 1 -type f | wc -l)
  badf=$(find "$w" -mindepth 1 -type f ! -perm "$f" -printf '%m %P\n')
  badd=$(find "$w" -mindepth 1 -type d ! -perm "$d" -printf '%m %P\n')
  if [ "$rc" = 0 ] && [ "$files" -ge 7 ] && [ -z "$badf" ] && [ -z "$badd" ]; then
    pass "umask $mask: $files files $f, directories $d ($(find "$w" -mindepth 1 -type f -printf '%P ' | sed 's/ckpt-[0-9-]*\.h5/ckpt-*.h5/g; s/events[^ ]*/events.*/g'))"
  else
    fail "umask $mask: rc=$rc, $files files; other modes: $badf $badd"; cat "$T/e" >&2
  fi
done

# --- planted symlinks under the temporary names ---
echo precious >"$T/victim"
sd=$T/sym
mkdir -p "$sd"
ln -s "$T/victim" "$sd/.latest.tmp"
ln -s "$T/victim" "$T/tl.json.tmp" # --timeline's temporary name
# rank 0 will be one of the next few processes: plant its temporary names
last=$(cat /proc/sys/kernel/ns_last_pid 2>/dev/null || echo 0)
p=$((last + 1))
while [ $p -le $((last + 150)) ]; do
  ln -s "$T/victim" "$sd/.ckpt-000001-00000000.h5.tmp.$p"
  ln -s "$T/victim" "$T/k.weights.h5.tmp.$p"
  p=$((p + 1))
done
run_np 2 "$good" --batch-size 8 --epochs 1 --model mlp --checkpoint-dir "$sd" --export-keras "$T/k.weights.h5" \
  --timeline "$T/tl.json"
if [ "$rc" = 0 ] && [ "$(cat "$T/victim")" = precious ] && [ -f "$sd/latest" ] && [ ! -L "$sd/latest" ] &&
   [ -f "$T/tl.json" ] && [ ! -e "$T/tl.json.tmp" ] &&
   [ "$(cat "$sd/latest")" = ckpt-000001-00000000.h5 ] && h5dump -H "$T/k.weights.h5" >/dev/null 2>&1 &&
   [ -z "$(find "$sd" -name '.ckpt-*' -o -name '.latest.tmp')" ]; then
  pass "symlinks planted as .latest.tmp, .ckpt-*.h5.tmp.PID, NAME.tmp.PID and the timeline's .tmp: not followed, target unchanged"
else
  fail "planted symlinks: rc=$rc, victim now '$(head -c 40 "$T/victim")'"; ls -la "$sd" | head >&2; cat "$err" >&2
fi

# --- latest names a file of the directory, nothing else ---
ck=$T/w002/ck
echo "TOPSECRET-LINE" >"$T/secret"
for bogus in "../../etc/passwd" "/etc/passwd" "symlink" "TOPSECRET"; do
  newest=$(ls "$ck" | grep "^ckpt-" | sort | tail -1)
  rm -f "$ck/latest"
  case $bogus in
    symlink) ln -s "$T/secret" "$ck/latest" ;;
    TOPSECRET) cp "$T/secret" "$ck/latest" ;;
    *) echo "$bogus" >"$ck/latest" ;;
  esac
  # nothing left to train: the checkpoint is only found and read
  run_np 2 "$good" $small --checkpoint-dir "$ck" --resume latest
  if [ "$rc" = 0 ] && grep -q "^dtrain: note: $ck/latest does not hold a checkpoint file name" "$err" &&
     grep -q "^dtrain: resuming from $ck/$newest" "$out" && ! grep -q 'TOPSECRET\|passwd' "$out" "$err"; then
    pass "latest = $bogus: refused with a note (content not echoed), resumed from the newest ckpt-*.h5"
  else
    fail "latest = $bogus: rc=$rc"; cat "$out" "$err" | head -20 >&2
  fi
done
mkdir -p "$T/none"
echo "../ck/$newest" >"$T/none/latest"
expect_fail 3 "checkpoint directory $T/none: no checkpoint in it" 2 "$good" $small --checkpoint-dir "$T/none" --resume latest

rm -rf "$T"
finish
