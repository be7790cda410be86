"""What a person sees on stderr: progress, the live status area, the totals, and crash logs
kept off the screen. Imports safety and the root leaves."""
