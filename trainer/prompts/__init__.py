"""The prompts of the later stages of multi-stage games, one module per game, each with
`prompt(item, question_text) -> str`; the game's registry row (protocol/games.py) names its
module."""
