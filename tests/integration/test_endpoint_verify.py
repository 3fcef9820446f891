"""endpoint_verify's checks against the real llama-server b11434 (CPU) and the generated lab models.

Each check is run where it must pass (the lab's shape: qwen35-mtp, draft-mtp + ngram-mod, two slots) and
where the live server cannot do what the env file configures: a chat template that raises on tools, one
that refuses an effort, a shape that declares a drafter the server does not run, a window larger than
the server's slot. The expectations come from an env dict, exactly as the module reads the live env file.
"""
from __future__ import annotations

import pytest

from ansible_collections.dankfleet.llm.plugins.module_utils.serve import endpoint_verify as ev

CHATML = ("{%- for message in messages %}{{- '<|im_start|>' + message['role'] + '\\n' + "
          "(message['content'] if message['content'] is string else '') + '<|im_end|>' + '\\n' }}{%- endfor %}"
          "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
RAISES_ON_TOOLS = ("{%- if tools %}{{ raise_exception('this template takes no tools') }}{% endif %}" + CHATML)
RAISES_ON_HIGH = ("{%- if reasoning_effort is defined and reasoning_effort == 'high' %}"
                  "{{ raise_exception('high is not an effort this template knows') }}{% endif %}" + CHATML)


def env_for(srv, **extra):
    env = {'ALIAS': 'frank-medium', 'MODEL_PATH': '/m.gguf', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': str(srv.port),
           'PARALLEL': '2', 'CTX_SIZE': '2048', 'SPEC_TYPE': '', 'VISION': 'off'}
    env.update(extra)
    return env


def by_name(result):
    return {c['name']: c for c in result['checks']}


def run(srv, opts=None, previous=None, **env):
    expect = ev.features(env_for(srv, **env))
    return ev.run_verify(expect, '', dict(opts or {}, request_timeout=120), previous_contract=previous)


@pytest.fixture
def template(tmp_path):
    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return path
    return write


def test_the_lab_shape_passes_every_check_it_configures(llama_server, lab_models):
    model = lab_models['qwen35-mtp']['path']
    with llama_server(model, '--parallel', '2', '--spec-type', 'draft-mtp,ngram-mod', '--spec-draft-n-max', '3',
                      '--metrics', ctx_size=2048) as srv:
        result = run(srv, SPEC_TYPE='draft-mtp,ngram-mod')
        checks = by_name(result)
        assert result['passed'], result['message'] + '\n' + srv.log_tail()
        assert [c['name'] for c in result['checks']] == list(ev.CHECKS)
        assert checks['vision']['status'] == 'skip' and 'VISION=off' in checks['vision']['reason']
        for name in ('stream', 'tools', 'slots', 'window'):
            assert checks[name]['status'] == 'pass', checks[name]
        assert checks['stream']['figures']['done'] and checks['stream']['figures']['chunks'] >= 1
        slots = checks['slots']['figures']['slots']
        assert [s['slot'] for s in slots] == [0, 1] and all(s['draft_n'] > 0 for s in slots), slots
        window = checks['window']['figures']
        assert window['slot_ctx'] == 1024 and window['prompt_tokens'] >= 0.9 * window['target_tokens']
        assert window['prompt_tokens'] > 900 and window['seconds'] > 0
        assert result['contract']['reasoning_efforts'] == {'low': 200, 'medium': 200, 'high': 200, 'xhigh': 200}
        assert result['contract']['context_per_slot'] == 1024 and result['contract']['url'].endswith('/v1')
        assert checks['prefix_cache']['status'] in ('pass', 'warn')
        assert checks['prefix_cache']['figures']['first_prefilled'] > 100


def test_a_template_that_raises_on_tools_fails_tools(llama_server, lab_models, template):
    path = template('no-tools.jinja', RAISES_ON_TOOLS)
    with llama_server(lab_models['dense-llama']['path'], '--parallel', '2', '--chat-template-file', path,
                      ctx_size=1024) as srv:
        result = run(srv, {'checks': ['stream', 'tools']}, CTX_SIZE='1024')
        tools = by_name(result)['tools']
        assert not result['passed'] and tools['status'] == 'fail' and tools['fatal']
        assert tools['figures']['status'] >= 400
        assert 'this template takes no tools' in tools['reason'] and result['findings'][0].startswith('verify tools:')
        assert by_name(result)['stream']['status'] == 'pass'


def test_the_effort_map_is_the_contract_and_a_change_is_a_finding(llama_server, lab_models, template):
    path = template('no-high.jinja', RAISES_ON_HIGH)
    with llama_server(lab_models['dense-llama']['path'], '--chat-template-file', path, ctx_size=1024) as srv:
        previous = {'alias': 'frank-medium', 'reasoning_efforts': {'low': 200, 'medium': 200, 'high': 200, 'xhigh': 200}}
        result = run(srv, {'checks': ['reasoning_effort']}, previous, PARALLEL='1', CTX_SIZE='1024')
        efforts = result['contract']['reasoning_efforts']
        assert efforts['low'] == efforts['medium'] == efforts['xhigh'] == 200 and efforts['high'] >= 400, efforts
        assert result['passed'] and result['findings'] == []        # a contract, not a broken feature
        assert result['contract_changes'] == ['reasoning_effort high answered HTTP 200, now %d' % efforts['high']]
        assert by_name(result)['reasoning_effort']['status'] == 'warn'
        assert any('client contract changed' in w for w in result['warnings'])
        again = run(srv, {'checks': ['reasoning_effort']}, result['contract'], PARALLEL='1', CTX_SIZE='1024')
        assert again['contract_changes'] == [] and by_name(again)['reasoning_effort']['status'] == 'pass'


def test_a_shape_whose_slots_never_draft_fails_slots_naming_each(llama_server, lab_models):
    # the env file declares a drafter; the server runs none: no slot drafts, each is named
    with llama_server(lab_models['qwen35-mtp']['path'], '--parallel', '2', ctx_size=1024) as srv:
        result = run(srv, {'checks': ['slots']}, SPEC_TYPE='draft-mtp', CTX_SIZE='1024')
        slots = by_name(result)['slots']
        assert not result['passed'] and slots['status'] == 'fail' and slots['fatal']
        assert 'slot 0 drafted 0 tokens' in slots['reason'] and 'slot 1 drafted 0 tokens' in slots['reason']
        # without a SPEC_TYPE the same server passes: drafts are asked only where configured
        plain = run(srv, {'checks': ['slots']}, CTX_SIZE='1024')
        assert plain['passed'] and 'drafts not asked' in by_name(plain)['slots']['reason']


def test_a_window_larger_than_the_slot_is_refused(llama_server, lab_models):
    # the env file says 2 x 2048; the server holds 2 x 512: /props says so before any filler is built or sent
    with llama_server(lab_models['dense-llama']['path'], '--parallel', '2', ctx_size=1024) as srv:
        result = run(srv, {'checks': ['window']}, CTX_SIZE='4096')
        window = by_name(result)['window']
        assert not result['passed'] and window['status'] == 'fail' and window['fatal'], window
        assert window['reason'].startswith('/props n_ctx 512 per slot, CTX_SIZE / PARALLEL 2048'), window['reason']
        fits = run(srv, {'checks': ['window'], 'window_fraction': 0.5}, CTX_SIZE='1024')
        assert fits['passed'], fits['message']
        assert by_name(fits)['window']['figures']['target_tokens'] <= 256


def test_vision_on_without_a_projector_fails_vision(llama_server, lab_models):
    # VISION=on in the env file, no --mmproj on the server: the runbook's first 327680 deploy
    with llama_server(lab_models['dense-llama']['path'], ctx_size=1024) as srv:
        result = run(srv, {'checks': ['vision']}, VISION='on', PARALLEL='1', CTX_SIZE='1024')
        vision = by_name(result)['vision']
        assert not result['passed'] and vision['status'] == 'fail' and vision['fatal'], vision
        assert vision['figures']['status'] >= 400 and 'not serving images' in vision['reason']


def test_vision_with_the_lab_projector_passes(llama_server, lab_models):
    # gen_models writes the projector with the small models: a missing one fails here (KeyError), never skips
    mmproj = lab_models['mmproj-qwen35']['path']
    with llama_server(lab_models['qwen35-mtp']['path'], '--mmproj', mmproj, ctx_size=2048) as srv:
        result = run(srv, {'checks': ['vision']}, VISION='on', PARALLEL='1', CTX_SIZE='2048')
        vision = by_name(result)['vision']
        assert result['passed'] and vision['status'] == 'pass', vision
        assert vision['figures']['prompt_tokens_image'] > vision['figures']['prompt_tokens_text']


def test_a_stream_from_a_port_nothing_serves_fails_without_raising(free_port):
    env = {'ALIAS': 'a', 'MODEL_PATH': '/m', 'BIND_ADDR': '127.0.0.1', 'LISTEN_PORT': str(free_port()),
           'PARALLEL': '1', 'CTX_SIZE': '1024'}
    result = ev.run_verify(ev.features(env), '', {'checks': ['stream', 'tools'], 'request_timeout': 5})
    assert not result['passed'] and len(result['findings']) == 2
    assert all(c['figures'].get('status') == -1 for c in result['checks'] if c['status'] == 'fail')
