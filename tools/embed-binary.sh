#!/bin/sh
# embed-binary.sh NAME FILE: a C source defining `const unsigned char NAME[]`
# with FILE's bytes (8-byte aligned, as cuModuleLoadData wants a fatbin).
set -e
name=$1 file=$2
echo "/* Generated from $(basename "$file") by embed-binary.sh; do not edit. */"
echo "__attribute__((aligned(8))) const unsigned char ${name}[] = {"
od -An -v -tx1 "$file" | sed -e 's/ *$//' -e 's/^ *//' -e 's/ \{1,\}/, 0x/g' -e 's/^/  0x/' -e 's/$/,/'
echo "};"
