from claw_batch.cli import main

main()
