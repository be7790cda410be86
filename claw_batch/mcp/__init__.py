"""Tools from Model Context Protocol servers: named in the clawfile, started by the run,
contained like bash (README, *MCP servers*)."""
