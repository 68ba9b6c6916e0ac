module nvpair.dev/wm/consumer

go 1.19
