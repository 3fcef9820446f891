# -*- coding: utf-8 -*-
# Copyright (c) dankfleet engineers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shapes of llama-server b11434's answers that the gate and the verify stage read, declared once.

Every answer is read through one of these at the seam (``read_answer(body, CHAT, 'POST
/v1/chat/completions')``) before a check indexes into it: a wrong type, a missing required field, a number
that is not finite or out of range, JSON nested too deep -- each is a ``typed_reader.ShapeError`` naming the
request and the path (``POST /v1/chat/completions choices[0].message: ...``), which a check turns into a
fail or a finding; never a TypeError from deep inside a check, never a default that lets a check pass.

Only what the checks read is typed; every other key is dropped (``Obj``), so nothing untyped travels on.
The shapes follow tools/server/server-task.cpp and server-context.cpp of b11434: ``timings`` carries
``draft_n`` only when the slot drafted, ``content`` is null beside ``tool_calls``, the last stream chunk
may carry ``"choices": []`` with the usage.

Stdlib only: the modules run it on the host.
"""

from __future__ import (absolute_import, division, print_function)
__metaclass__ = type

from ansible_collections.dankfleet.llm.plugins.module_utils.base import typed_reader as tr

INT32 = 2 ** 31 - 1           # llama.cpp keeps token ids, counts and n_ctx in int32
TEXT_MAX = 16 << 20           # characters of one text field: the HTTP client refuses a longer answer anyway
COUNT = tr.Int(0, INT32)
TEXT = tr.Str(max_len=TEXT_MAX)
NAME = tr.Str(max_len=256)

USAGE = tr.Obj({'completion_tokens': COUNT, 'prompt_tokens': COUNT, 'total_tokens': COUNT},
               required=('completion_tokens', 'prompt_tokens'))

# draft_n / draft_n_accepted are written only when the slot drafted: absent is the server's 0
TIMINGS = tr.Obj({'prompt_n': COUNT, 'cache_n': COUNT, 'predicted_n': COUNT, 'draft_n': COUNT,
                  'draft_n_accepted': COUNT, 'prompt_ms': tr.Optional(tr.Num(0)),
                  'predicted_ms': tr.Optional(tr.Num(0))})
TIMINGS_PREFILL = tr.Obj(dict(TIMINGS.fields), required=('prompt_n',))

TOOL_CALL = tr.Obj({'type': NAME, 'id': NAME,
                    'function': tr.Obj({'name': NAME, 'arguments': TEXT}, required=('name', 'arguments'))},
                   required=('function',))

MESSAGE = tr.Obj({'role': NAME, 'content': tr.Optional(TEXT), 'reasoning_content': tr.Optional(TEXT),
                  'tool_calls': tr.List(TOOL_CALL, max_len=64)})

CHOICE = tr.Obj({'index': COUNT, 'finish_reason': tr.Optional(NAME), 'message': MESSAGE}, required=('message',))


def chat_shape(timings=None):
    """A chat completion: at least one choice with its message, and the usage; ``timings`` when a check
    needs them (TIMINGS, or TIMINGS_PREFILL for prompt_n)."""
    fields = {'choices': tr.List(CHOICE, min_len=1, max_len=16), 'usage': USAGE, 'model': NAME,
              'timings': timings or TIMINGS}
    return tr.Obj(fields, required=('choices', 'usage') + (('timings',) if timings else ()))


CHAT = chat_shape()
# the gate reads only the generated tokens: it asks no more of the usage than that
GATE_CHAT = tr.Obj({'choices': tr.List(CHOICE, min_len=1, max_len=16),
                    'usage': tr.Obj({'completion_tokens': COUNT}, required=('completion_tokens',))},
                   required=('choices', 'usage'))
CHAT_TIMED = chat_shape(TIMINGS)
CHAT_PREFILL = chat_shape(TIMINGS_PREFILL)

DELTA = tr.Obj({'role': NAME, 'content': tr.Optional(TEXT), 'reasoning_content': tr.Optional(TEXT),
                'tool_calls': tr.List(tr.Json(), max_len=64)})
CHUNK = tr.Obj({'choices': tr.List(tr.Obj({'index': COUNT, 'finish_reason': tr.Optional(NAME), 'delta': DELTA},
                                          required=('delta',)), max_len=16),
                'usage': USAGE, 'timings': TIMINGS}, required=('choices',))

PROPS = tr.Obj({
    'default_generation_settings': tr.Obj({'n_ctx': COUNT}, required=('n_ctx',)),
    'total_slots': COUNT,
    # every modality kept (video too): the client contract records them all
    'modalities': tr.Obj({'vision': tr.Bool()}, required=('vision',), extra=tr.Bool()),
    'build_info': tr.Str(max_len=256, name=True),
    'model_alias': NAME,
}, required=('default_generation_settings', 'total_slots', 'modalities'))

# What the defaults check reads of /props: the sampler defaults every client gets when it sends none
# (default_generation_settings.params, task_params::to_json(true) in tools/server/server-task.cpp); every
# one b11434 writes is required, so a server that drops one is named, never compared as equal.
SAMPLER_PARAMS = tr.Obj({'temperature': tr.Num(), 'top_p': tr.Num(), 'top_k': tr.Int(-INT32, INT32),
                         'min_p': tr.Num(), 'presence_penalty': tr.Num(), 'n_predict': tr.Int(-INT32, INT32)},
                        required=('temperature', 'top_p', 'top_k', 'min_p', 'presence_penalty'))
PROPS_DEFAULTS = tr.Obj({'default_generation_settings': tr.Obj({'params': SAMPLER_PARAMS}, required=('params',))},
                        required=('default_generation_settings',))

MODELS = tr.Obj({'data': tr.List(tr.Obj({'id': NAME}, required=('id',)), max_len=1024)}, required=('data',))

TOKENIZE = tr.Obj({'tokens': tr.List(COUNT, max_len=1 << 22)}, required=('tokens',))
DETOKENIZE = tr.Obj({'content': TEXT}, required=('content',))

ERROR = tr.Obj({'error': tr.Obj({'message': TEXT, 'type': NAME, 'code': tr.Int()}, required=('message',))},
               required=('error',))


def read_answer(body, shape, source):
    """The answer's JSON text read through shape; ShapeError names source and the path inside."""
    return tr.load_json(body, source, shape)


def error_text(body):
    """The server's error message from an answer body (``{"error": {"message": ...}}``), else the body, with
    on one line with every control character escaped: it is quoted in a finding on the controller's terminal."""
    try:
        text = read_answer(body, ERROR, 'the error answer')['error']['message']
    except tr.ShapeError:
        text = body if isinstance(body, str) else ''
    return tr.printable(' '.join(text.split()))      # one line: a template's error spans several
