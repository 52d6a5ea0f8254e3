#!/bin/sh
# man_page_test.sh HANGTRACE MANPAGE: the man page (help2man, cmake/ManPage.cmake)
# renders with man(1), is the page of this binary's version, and has every
# option of `hangtrace --help` and of each subcommand's --help as an entry.
set -eu
bin=$1
page=$2
rendered=$(LC_ALL=C MANWIDTH=200 MANPAGER=cat man -l "$page" 2>&1 | col -bx) || {
  echo "man -l $page failed: $rendered"; exit 1; }
fail=0
has_line() {  # has_line EXTENDED-REGEX WHAT
  printf '%s\n' "$rendered" | grep -qE "$1" || { echo "man page lacks $2"; fail=1; }
}
has_line '^NAME$' "a NAME section"
has_line '^ +hangtrace - why did this training job stop making progress' "the NAME line"
version=$("$bin" --version)
has_line "$version" "'$version' (hangtrace --version)"
has_line '^ +sudo hangtrace --pid' "the EXAMPLES"
# has_options WHAT HELP: each option entry of HELP ("  -p,--pid INT  ...") is an
# entry of the page (a line of its own, starting with the same spelling).
has_options() {
  for opt in $(printf '%s\n' "$2" | sed -n 's/^  \(-[^ ]*\).*/\1/p'); do
    has_line "^ +$opt( |\$)" "$opt ($1)"
    checked=$((checked + 1))
  done
}
checked=0
help=$("$bin" --help)
has_options "hangtrace --help" "$help"
for sub in $(printf '%s\n' "$help" | awk '/^Subcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1}'); do
  has_line "^ +hangtrace $sub:\$" "a section for 'hangtrace $sub'"
  has_options "hangtrace $sub --help" "$("$bin" "$sub" --help)"
done
[ "$fail" = 0 ] || exit 1
echo "man page $(basename "$page"): $checked options of --help and the subcommands' --help, all present"
