#!/bin/sh
# distfiles.sh DISTDIR SRCDIR: the tarball's contents against the source tree,
# run by `make dist` (Makefile.am's dist-hook) on the tree about to be packed.
#
# Fails, naming the files, when a file of the source tree (tracked by git, or
# new and not ignored) is missing from DISTDIR
# (add it to EXTRA_DIST or to a dist_ variable in Makefile.am), or when
# DISTDIR holds a file that is neither tracked nor made by autoreconf: a build
# product that a directory named in EXTRA_DIST picked up from the build tree
# (automake copies the build tree's directory of the same name too). Only
# .gitignore stays out. Where SRCDIR is not the top of a git checkout (a
# tarball's own tree, as in make distcheck) there is nothing to compare with.
set -u
distdir=$1 srcdir=$2
top=$(git -C "$srcdir" rev-parse --show-toplevel 2>/dev/null) || top=
if [ -z "$top" ] || [ "$(cd "$top" && pwd -P)" != "$(cd "$srcdir" && pwd -P)" ]; then
  echo "distfiles.sh: $srcdir is not a git checkout; the tarball's file list is not checked"
  exit 0
fi
tracked=$(mktemp) packed=$(mktemp)
trap 'rm -f "$tracked" "$packed"' EXIT
# Tracked or new, and present (a file deleted but not yet committed is not missing).
git -C "$srcdir" ls-files --cached --others --exclude-standard | while IFS= read -r f; do
  [ "$f" = .gitignore ] || [ ! -e "$srcdir/$f" ] || printf '%s\n' "$f"
done | LC_ALL=C sort >"$tracked"
(cd "$distdir" && find . -type f | sed 's|^\./||') | LC_ALL=C sort >"$packed"
missing=$(LC_ALL=C comm -23 "$tracked" "$packed")
extra=$(LC_ALL=C comm -13 "$tracked" "$packed" |
  grep -v -x -E 'Makefile\.in|configure|aclocal\.m4|config\.h\.in|build-aux/[^/]+|m4/(libtool|ltoptions|ltsugar|ltversion|lt~obsolete)\.m4')
status=0
if [ -n "$missing" ]; then
  echo "distfiles.sh: in the source tree but not in the tarball (add them to Makefile.am's EXTRA_DIST or a dist_ variable):" >&2
  echo "$missing" | sed 's/^/  /' >&2
  status=1
fi
if [ -n "$extra" ]; then
  echo "distfiles.sh: in the tarball but neither in the source tree nor made by autoreconf (a build product? list files, not their directory):" >&2
  echo "$extra" | sed 's/^/  /' >&2
  status=1
fi
[ "$status" -ne 0 ] || echo "distfiles.sh: the tarball holds the source tree's $(wc -l <"$tracked") files and what autoreconf made"
exit "$status"
