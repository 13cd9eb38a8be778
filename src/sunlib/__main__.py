from sunlib.cli import main

main()
