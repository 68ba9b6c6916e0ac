module nvpair-wm/bench/goload

go 1.19
