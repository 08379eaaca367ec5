from dispatcher.cli.entry import main

main()
