#!/bin/sh
# distfiles.sh [--strict] DISTDIR SRCDIR: the tarball's contents against the
# source tree, run by `make dist` (Makefile.am's dist-hook) on the tree about
# to be packed.
#
# Names each file of the source tree (tracked by git, or new and not ignored)
# that is missing from DISTDIR (add it to EXTRA_DIST or to a dist_ variable in
# Makefile.am), and each file in DISTDIR that is neither tracked nor made by
# autoreconf: a build product that a directory named in EXTRA_DIST picked up
# from the build tree (automake copies the build tree's directory of the same
# name too). Only .gitignore stays out. The distribution directory being
# filled and the tarballs beside it are not source files, wherever they lie
# (an in-tree `make dist` makes them inside the checkout).
#
# By default what it finds is a warning and `make dist` goes on: a user's
# stray file (an editor's backup, a note) must not block a release. With
# --strict (make check-dist, and CI: DISTFILES_FLAGS=--strict) it fails.
# Where SRCDIR is not the top of a git checkout (a tarball's own tree, as in
# make distcheck) there is nothing to compare with.
set -u
strict=0
[ "${1:-}" = --strict ] && { strict=1; shift; }
[ $# -eq 2 ] || { echo "usage: distfiles.sh [--strict] DISTDIR SRCDIR" >&2; exit 2; }
distdir=$1 srcdir=$2
top=$(git -C "$srcdir" rev-parse --show-toplevel 2>/dev/null) || top=
if [ -z "$top" ] || [ "$(cd "$top" && pwd -P)" != "$(cd "$srcdir" && pwd -P)" ]; then
  echo "distfiles.sh: $srcdir is not a git checkout; the tarball's file list is not checked"
  exit 0
fi
src_abs=$(cd "$srcdir" && pwd -P)
dist_abs=$(cd "$distdir" && pwd -P)
# The distdir relative to the source tree, when it lies inside it ("" when not).
case $dist_abs/ in
  "$src_abs"/*) dist_rel=${dist_abs#"$src_abs"/} ;;
  *) dist_rel= ;;
esac
tracked=$(mktemp) packed=$(mktemp)
trap 'rm -f "$tracked" "$packed"' EXIT
# Tracked or new, and present (a file deleted but not yet committed is not
# missing), less the distdir and its tarballs.
git -C "$srcdir" ls-files --cached --others --exclude-standard | while IFS= read -r f; do
  [ "$f" = .gitignore ] || [ ! -e "$srcdir/$f" ] && continue
  if [ -n "$dist_rel" ]; then
    case $f in "$dist_rel"/* | "$dist_rel".tar* | "$dist_rel".zip | "$dist_rel".shar*) continue ;; esac
  fi
  printf '%s\n' "$f"
done | LC_ALL=C sort >"$tracked"
(cd "$distdir" && find . -type f | sed 's|^\./||') | LC_ALL=C sort >"$packed"
missing=$(LC_ALL=C comm -23 "$tracked" "$packed")
extra=$(LC_ALL=C comm -13 "$tracked" "$packed" |
  grep -v -x -E 'Makefile\.in|configure|aclocal\.m4|config\.h\.in|build-aux/[^/]+|m4/(libtool|ltoptions|ltsugar|ltversion|lt~obsolete)\.m4')
if [ "$strict" -eq 1 ]; then what="distfiles.sh"; else what="distfiles.sh: warning"; fi
found=0
if [ -n "$missing" ]; then
  echo "$what: in the source tree but not in the tarball (add them to Makefile.am's EXTRA_DIST or a dist_ variable, or remove them):" >&2
  echo "$missing" | sed 's/^/  /' >&2
  found=1
fi
if [ -n "$extra" ]; then
  echo "$what: in the tarball but neither in the source tree nor made by autoreconf (a build product? list files, not their directory):" >&2
  echo "$extra" | sed 's/^/  /' >&2
  found=1
fi
if [ "$found" -eq 0 ]; then
  echo "distfiles.sh: the tarball holds the source tree's $(wc -l <"$tracked") files and what autoreconf made"
elif [ "$strict" -eq 1 ]; then
  exit 1
else
  echo "distfiles.sh: warning only; \`make check-dist' fails on these" >&2
fi
exit 0
