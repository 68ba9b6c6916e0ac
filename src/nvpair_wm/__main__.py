from nvpair_wm.entry import main

main()
