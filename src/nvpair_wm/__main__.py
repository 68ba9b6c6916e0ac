from nvpair_wm.cli import main

main()
