#!/bin/sh
# options_doc.sh: doc/dtrain.1 documents exactly dtrain's options.
#
# The options are the table's (src/options_table.c, printed by
# tests/list_options as built) and those --help lists. Each must have a
# .TP entry in dtrain.1's OPTIONS section, with the same short option, and
# where the table has a list of accepted names (--ps-mode async|ssp|sync),
# the entry's tag must list the same names in bold: "--ps-mode
# \fBasync\fR|\fBssp\fR|\fBsync\fR" (italic words are placeholders,
# [bracketed] parts are optional units). An entry for an option the table
# lacks fails too.
#
# The check then runs on three copies of the page broken on purpose (an
# entry dropped, an entry added, a choice renamed) and must refuse each,
# so it cannot pass by checking nothing. DTRAIN_MAN checks another page.
. "$TOP_SRCDIR/tests/common.sh"
MAN=${DTRAIN_MAN:-$TOP_SRCDIR/doc/dtrain.1}
T=$TEST_TMP/options_doc.$$
mkdir -p "$T"

"$TOP_BUILDDIR/tests/list_options" >"$T/table" || { echo "tests/list_options failed"; exit 99; }
run_np 1 --help
[ "$rc" = 0 ] || { echo "dtrain --help: exit $rc"; cat "$err"; exit 99; }
# Options --help has a line for that the table would not print (none, as --help is made from it).
sed -n 's/^  \(-\(.\), \|    \)--\([a-z0-9-]*\).*/\3 \2/p' "$out" | while read -r name letter; do
  grep -q "^$name " "$T/table" || echo "$name ${letter:--}"
done >>"$T/table"
[ "$(wc -l <"$T/table")" -ge 60 ] || { echo "only $(wc -l <"$T/table") options in the table"; exit 99; }

# check_page PAGE: prints one line per difference; exit status 1 if any.
check_page() {
  awk '
    FNR == NR { letter[$1] = $2; c = ""; for (i = 3; i <= NF; i++) c = c " " $i; choices[$1] = c; next }
    /^\.SH/ { on = ($0 ~ /^\.SH OPTIONS/) }
    on && prev == ".TP" {
      t = $0; gsub(/\\-/, "-", t)
      if (match(t, /--[a-z0-9][a-z0-9-]*/)) {
        name = substr(t, RSTART + 2, RLENGTH - 2); rest = substr(t, RSTART + RLENGTH); head = substr(t, 1, RSTART - 1)
        l = "-"; if (match(head, /^\.B[RI]? +-[A-Za-z]/)) l = substr(head, RLENGTH, 1)
        gsub(/\[[^]]*\]/, "", rest)
        c = ""
        while (match(rest, /\\fB[^\\"]+/)) { c = c " " substr(rest, RSTART + 3, RLENGTH - 3); rest = substr(rest, RSTART + RLENGTH) }
        if (name in seen) { print "dtrain.1 has two entries for --" name; bad++ }
        seen[name] = 1; mletter[name] = l; mchoices[name] = c
      }
    }
    { prev = $0 }
    function sorted(s,   a, n, i, j, x, out) {
      n = split(s, a, " ")
      for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
      out = ""; for (i = 1; i <= n; i++) out = out " " a[i]
      return out
    }
    END {
      for (n in letter) {
        if (!(n in seen)) { print "dtrain.1 does not document --" n; bad++; continue }
        if (mletter[n] != letter[n]) { print "--" n ": short option " letter[n] " in the table, " mletter[n] " in dtrain.1"; bad++ }
        if (sorted(mchoices[n]) != sorted(choices[n])) { print "--" n ": the table accepts {" choices[n] " }, dtrain.1 lists {" mchoices[n] " }"; bad++ }
      }
      for (n in seen) if (!(n in letter)) { print "dtrain.1 documents --" n ", which the table lacks"; bad++ }
      exit bad > 0
    }' "$T/table" "$1"
}

if check_page "$MAN" >"$T/found"; then
  pass "dtrain.1 documents the $(wc -l <"$T/table") options of the table, with their short options and choices"
else
  fail "dtrain.1 and the option table differ:"; cat "$T/found" >&2
fi

# The same check on pages broken on purpose must fail, each for its reason.
broken() { # WHAT PATTERN SED-SCRIPT
  sed "$3" "$MAN" >"$T/broken.1"
  if check_page "$T/broken.1" >"$T/found"; then fail "self-test: a page with $1 passed"
  elif grep -q -- "$2" "$T/found"; then pass "self-test: a page with $1 fails: $(cat "$T/found")"
  else fail "self-test: a page with $1 fails, but not for that: $(cat "$T/found")"; fi
}
broken "--keep's entry dropped" "does not document --keep" '/^\.BI \\-\\-keep /d'
broken "an entry for an option that does not exist" "documents --no-such-option, which the table lacks" \
  's/^\.SS Output$/.TP\n.B \\-\\-no\\-such\\-option\n&/'
broken "a --ps-mode choice renamed" "--ps-mode: the table accepts" 's/\\fBssp\\fR|/\\fBstale\\fR|/'

rm -rf "$T"
finish
