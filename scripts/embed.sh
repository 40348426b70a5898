#!/bin/sh
# Write, on standard output, C source that defines the string NAME with the
# text of FILE (a script that runs elsewhere, compiled into the library).
# Usage: embed.sh NAME FILE
set -e
name="$1"
file="$2"
echo "/* generated from $(basename "$file") */"
echo "const char ${name}[] ="
sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/^/"/' -e 's/$/\\n"/' "$file"
echo ';'
