"""A chat turn, from messages to a prompt and from the model's text back to events. Pure Python.

Everything a rule about a chat turn needs lives here, and nothing here serves HTTP, loads a model
or starts a process (no aiohttp, no llama_cpp, no worker pools: the daemon runs renders in bounded
workers, :mod:`localrun.server.rendering`):

- ``template`` / ``gotemplate``: chat templates (sandboxed Jinja2, Ollama's Go-template subset);
  ``template_limits`` / ``template_nesting``: what a template may compute and how deep it may nest
- ``prompt``: a conversation's messages checked and rendered to a prompt (roles, the Modelfile's
  MESSAGEs and SYSTEM, the system prefix kept when truncating)
- ``format``: what a template says about replies (tool-call format, thinking tags, capabilities)
- ``parse``: the model's output back to content, thinking and tool calls, in each family's format
- ``tools``: tool definitions checked, tool choice, forced and strict calls as grammars
- ``events``: the chat event types every API adapter maps onto its wire shape
"""
