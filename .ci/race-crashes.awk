# race-crashes.awk reads the output of go test -race over packages (each
# package's output whole, ending in "ok", "?" or "FAIL" and its import
# path) and prints the failed packages whose test binary died of the race
# runtime's own assertion, "ThreadSanitizer: CHECK failed" (Go issue 78156,
# a fault of the toolchain), and reported no failed test or data race
# before it: the race runtime may die of it while reporting one. It exits
# 1 if any package failed otherwise. .ci/run reruns the packages printed;
# internal/docs's TestRaceCrashes checks this rule.
/ThreadSanitizer: CHECK failed/ { check = 1 }
/WARNING: DATA RACE|^[ \t]*--- FAIL|race detected during execution of test/ { real = 1 }
/^(ok|\?)[ \t]/ { check = 0; real = 0 }
/^FAIL[ \t]/ { if (check && !real) print $2; else other = 1; check = 0; real = 0 }
END { exit other }
