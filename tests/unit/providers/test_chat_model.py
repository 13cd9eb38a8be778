"""The ChatModel kind against the real local chat server: typed messages, streaming, JSON mode, tools.

Also: the LLM writer exposes its model through ``Writer.chat_model``, the LLM router is built
on that model, and neither keeps anything of one call on itself.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sunlib.answer.single.router import ROUTER_PROMPT, LLMRouter, RuleRouter, create_router
from sunlib.config import LLMSettings, load_settings
from sunlib.errors import ConfigError, ProviderError, UnsupportedCapability
from sunlib.providers import (
    ChatCapabilities,
    ChatMessage,
    ChatRequest,
    ToolCall,
    ToolSpec,
    create_chat_model,
    create_writer,
)
from sunlib.providers.chat.openai import OpenAIChatModel
from sunlib.providers.registry import chat_model_names
from tests.harness.llm_server import ChatServer

WEATHER = ToolSpec(
    name="get_weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
HELLO = (ChatMessage.system("Be brief."), ChatMessage.user("Say hello."))


@pytest.fixture
def server(chat_server: ChatServer) -> ChatServer:
    """The local OpenAI-compatible test server (conftest's ``chat_server``)."""
    return chat_server


def model(server: ChatServer, **llm: object) -> OpenAIChatModel:
    settings = LLMSettings.model_validate({"base_url": server.base_url, "model": "test-model", **llm})
    chat = create_chat_model("openai", settings)
    assert isinstance(chat, OpenAIChatModel)
    return chat


def test_registered_chat_models() -> None:
    assert {"openai", "llama-cpp"} <= set(chat_model_names())


def test_plain_reply_from_typed_messages(server: ChatServer) -> None:
    server.writer.reply = "Hello there."
    server.writer.usage = {"prompt_tokens": 12, "completion_tokens": 3}
    reply = model(server).chat(ChatRequest(HELLO, temperature=0.7, max_tokens=20))

    (body,) = server.bodies("writer")
    assert body == {
        "model": "test-model",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello."}],
        "temperature": 0.7,
        "max_tokens": 20,
    }
    assert reply.text == "Hello there." and reply.model == "test-model"
    assert (reply.prompt_tokens, reply.completion_tokens) == (12, 3)
    assert reply.streamed is False and reply.tool_calls == () and reply.finish_reason == "stop"


def test_streamed_reply_reaches_the_callback(server: ChatServer) -> None:
    server.writer.reply = "Hello there, streamed."
    deltas: list[str] = []
    reply = model(server).chat(ChatRequest(HELLO), deltas.append)

    (body,) = server.bodies("writer")
    assert body["stream"] is True and body["temperature"] == 0.1 and body["max_tokens"] == 600
    assert deltas == ["Hello ", "there,", " strea", "med."]
    assert reply.text == "".join(deltas) and reply.streamed is True


def test_stream_off_never_calls_the_callback(server: ChatServer) -> None:
    server.writer.reply = "Hello."
    deltas: list[str] = []
    reply = model(server, stream=False).chat(ChatRequest(HELLO), deltas.append)
    assert "stream" not in server.bodies("writer")[0]
    assert deltas == [] and reply.text == "Hello." and reply.streamed is False


def test_json_mode_is_requested(server: ChatServer) -> None:
    server.writer.reply = '{"answer": 42}'
    reply = model(server).chat(ChatRequest(HELLO, json_mode=True))
    assert server.bodies("writer")[0]["response_format"] == {"type": "json_object"}
    assert json.loads(reply.text) == {"answer": 42}


@pytest.mark.parametrize("streamed", [False, True])
def test_tool_calls_come_back_typed(server: ChatServer, streamed: bool) -> None:
    server.writer.tool_calls = [("call_1", "get_weather", '{"city": "Vellington"}'), ("call_2", "get_weather", "{}")]
    deltas: list[str] = []
    request = ChatRequest(HELLO, tools=(WEATHER,), tool_choice="auto")
    reply = model(server).chat(request, deltas.append if streamed else None)

    (body,) = server.bodies("writer")
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "description": WEATHER.description, "parameters": WEATHER.parameters},
        }
    ]
    assert body["tool_choice"] == "auto"
    assert reply.tool_calls == (
        ToolCall("call_1", "get_weather", '{"city": "Vellington"}'),
        ToolCall("call_2", "get_weather", "{}"),
    )
    assert reply.tool_calls[0].parsed_arguments() == {"city": "Vellington"}
    assert reply.text == "" and deltas == [] and reply.finish_reason == "tool_calls"
    assert reply.streamed is streamed


def test_tool_results_go_back_as_messages(server: ChatServer) -> None:
    call = ToolCall("call_1", "get_weather", '{"city": "Vellington"}')
    messages = (
        *HELLO,
        ChatMessage("assistant", "", tool_calls=(call,)),
        ChatMessage("tool", '{"sky": "clear"}', tool_call_id="call_1"),
    )
    model(server).chat(ChatRequest(messages, tools=(WEATHER,), tool_choice="get_weather"))

    body = server.bodies("writer")[0]
    assert body["messages"][2:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Vellington"}'},
                }
            ],
        },
        {"role": "tool", "content": '{"sky": "clear"}', "tool_call_id": "call_1"},
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


@pytest.mark.parametrize(
    ("capabilities", "request_", "missing"),
    [
        (ChatCapabilities(json_mode=False, tool_calls=True), ChatRequest(HELLO, json_mode=True), "JSON mode"),
        (ChatCapabilities(json_mode=True, tool_calls=False), ChatRequest(HELLO, tools=(WEATHER,)), "tool calls"),
    ],
)
def test_a_missing_capability_is_a_clear_error(
    server: ChatServer, capabilities: ChatCapabilities, request_: ChatRequest, missing: str
) -> None:
    settings = LLMSettings(base_url=server.base_url, model="plain-model")
    chat = OpenAIChatModel(settings, capabilities=capabilities)
    with pytest.raises(UnsupportedCapability, match=f"'plain-model' does not support {missing}; it supports: "):
        chat.chat(request_)
    assert server.requests == []  # refused before anything was sent


def test_the_llm_writer_exposes_its_chat_model(server: ChatServer, tmp_path: Path) -> None:
    llm = {"base_url": server.base_url, "model": "test-model"}
    writer = create_writer(load_settings(tmp_path, answer={"writer": "openai"}, llm=llm))
    assert isinstance(writer.chat_model, OpenAIChatModel) and writer.is_llm
    assert writer.model == "test-model" and writer.name == "openai"
    extractive = create_writer(load_settings(tmp_path, answer={"writer": "extractive"}))
    assert extractive.chat_model is None and not extractive.is_llm

    routed = create_router("auto", writer)
    assert isinstance(routed, LLMRouter) and routed.chat is writer.chat_model
    assert isinstance(create_router("llm", writer), LLMRouter)
    assert isinstance(create_router("rules", writer), RuleRouter)
    assert isinstance(create_router("auto", extractive), RuleRouter)
    assert isinstance(create_router("llm", extractive), RuleRouter)  # no LLM to ask: the rules


def test_llm_router_keeps_nothing_of_a_call(server: ChatServer) -> None:
    router = LLMRouter(model(server))
    state = dict(vars(router))
    server.router.reply = "no JSON here"
    failed = router.decide("How do I install sunlib?")
    server.router.reply = '{"route": "direct", "reason": "a greeting", "confidence": 0.9}'
    decided = router.decide("hello")

    assert failed.router == "rules (llm fallback)" and failed.route == "rag"
    assert failed.fallback == "LLM router failed (reply has no JSON object); used the rules"
    assert decided.router == "llm" and decided.route == "direct" and decided.fallback is None
    assert vars(router) == state
    assert [b["messages"][0]["content"] for b in server.bodies("router")] == [ROUTER_PROMPT] * 2
    assert all("response_format" not in b for b in server.bodies("router"))


def test_stream_without_finish_is_an_error(server: ChatServer) -> None:
    server.writer.data_lines = [json.dumps({"choices": [{"index": 0, "delta": {"content": "Hel"}}]})]
    with pytest.raises(ProviderError, match="ended without finishing"):
        model(server).chat(ChatRequest(HELLO), lambda d: None)


def test_llama_cpp_without_its_package_is_a_config_error(tmp_path: Path) -> None:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("llama-cpp-python is installed")
    settings = load_settings(tmp_path, answer={"writer": "llama-cpp"})
    with pytest.raises(ConfigError, match="the llama-cpp writer needs llama-cpp-python"):
        create_writer(settings)
