#!/bin/sh
# Generate configure and Makefile.in (they are never committed).
set -e
cd "$(dirname "$0")"
autoreconf -fi
