#!/bin/sh
# A stand-in for lvm, for `--lvm-command "fake-lvm.sh MODE"`. It checks that nodegate asked for
# one fullreport in the documented form, then: MODE is a fixture file (printed on stdout),
# "hang:TAG" (never answers; its child sleeps too, so only a process-group kill cleans up),
# or "exit:N" (an lvm error with nothing on stdout).
mode=$1
shift
[ "$1" = fullreport ] || { echo "fake-lvm: expected fullreport, got: $*" >&2; exit 3; }
case " $* " in
  *" --reportformat json --units b --nosuffix "*) ;;
  *) echo "fake-lvm: missing report options in: $*" >&2; exit 3 ;;
esac
case $mode in
  hang:*)
    sleep "6${mode#hang:}" &
    sleep "6${mode#hang:}"
    ;;
  exit:*)
    echo "  Volume group \"vmdata\" not found" >&2
    exit "${mode#exit:}"
    ;;
  *) cat "$mode" ;;
esac
