#!/bin/sh
# A stand-in for lvm, for `--lvm-command "fake-lvm.sh MODE"`. It checks that nodegate asked for
# one fullreport in the documented form, then: MODE is a fixture file (printed on stdout),
# "hang:TAG" (never answers; its child sleeps too, so only a process-group kill cleans up),
# "detach:TAG" (closes stdout and stderr, then hangs the same way: only the deadline on the
# process itself ends it), "exit:N" (an lvm error with nothing on stdout), "report-exit:N:FILE"
# (prints the report FILE, then fails with exit code N) or "report-signal:SIG:FILE" (prints
# FILE, then dies of signal SIG, as a crashing lvm would).
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
  detach:*)
    exec >&- 2>&-
    sleep "6${mode#detach:}" &
    sleep "6${mode#detach:}"
    ;;
  report-exit:*)
    rest=${mode#report-exit:}
    cat "${rest#*:}"
    echo "  WARNING: Running as a non-root user. Functionality may be unavailable." >&2
    exit "${rest%%:*}"
    ;;
  report-signal:*)
    rest=${mode#report-signal:}
    cat "${rest#*:}"
    kill "-${rest%%:*}" $$
    ;;
  exit:*)
    echo "  Volume group \"vmdata\" not found" >&2
    exit "${mode#exit:}"
    ;;
  *) cat "$mode" ;;
esac
