module github.com/ratelane/ratelane/bench/exectrace

go 1.26.8

require golang.org/x/exp v0.0.0-20261120182113-8801fbdfac81
