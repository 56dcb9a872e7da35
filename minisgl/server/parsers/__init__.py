"""Reading a chat model's output back into OpenAI's fields: reasoning_content and tool_calls."""

from .chat_output import ChatOutputFormat, ChatOutputReader
from .detect import ToolParserChoice, choose_tool_parser, tool_parser_for
from .reasoning import REASONING_PARSERS, ThinkParser
from .tool_calls import TOOL_PARSERS, HermesToolParser, Llama3JsonToolParser, ParsedCall

__all__ = ["ChatOutputFormat", "ChatOutputReader", "REASONING_PARSERS", "ThinkParser", "TOOL_PARSERS",
           "HermesToolParser", "Llama3JsonToolParser", "ParsedCall", "ToolParserChoice", "choose_tool_parser",
           "tool_parser_for"]
