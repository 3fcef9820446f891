/* gguf-check: read one GGUF file with llama.cpp's own reader and print the verdict as JSON.
 *
 * The differential oracle of tests/unit/plugins/module_utils/test_gguf_differential.py: the file goes
 * through libggml's gguf_init_from_file exactly as llama_model_loader calls it (no_alloc, a ggml
 * context for the tensors), then through the one check the loader adds on top (llama-model-loader.h
 * llama_tensor_weight: every tensor's data within the file). Built by tests/lab/build-llama-server.sh
 * against the same build tree as llama-server, so it is the b11434 reader, not a copy of it.
 *
 *   {"ok": false, "error": "<what ggml logged>"}
 *   {"ok": true, "version": 3, "alignment": 32, "data_offset": N, "n_kv": N,
 *    "tensors": [{"name": "...", "type": T, "ne": [a, b, c, d], "offset": ABS, "nbytes": N}, ...]}
 *
 * Exit status 0 either way (2 on a usage error): the verdict is the JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/stat.h>

#include "ggml.h"
#include "gguf.h"

static char log_buf[8192];
static size_t log_len;

static void capture(enum ggml_log_level level, const char * text, void * user_data) {
    (void) user_data;
    if (level != GGML_LOG_LEVEL_ERROR && level != GGML_LOG_LEVEL_WARN && level != GGML_LOG_LEVEL_CONT) {
        return;
    }
    size_t n = strlen(text);
    if (n > sizeof(log_buf) - 1 - log_len) {
        n = sizeof(log_buf) - 1 - log_len;
    }
    memcpy(log_buf + log_len, text, n);
    log_len += n;
    log_buf[log_len] = 0;
}

static void json_string(const char * s) {
    putchar('"');
    for (const unsigned char * p = (const unsigned char *) s; *p; p++) {
        if (*p == '"' || *p == '\\') {
            printf("\\%c", *p);
        } else if (*p < 0x20 || *p >= 0x7f) {
            printf("\\u%04x", *p);
        } else {
            putchar(*p);
        }
    }
    putchar('"');
}

static int refuse(const char * why) {
    printf("{\"ok\": false, \"error\": ");
    json_string(why);
    printf("}\n");
    return 0;
}

int main(int argc, char ** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s FILE.gguf\n", argv[0]);
        return 2;
    }
    ggml_log_set(capture, NULL);
    struct ggml_context * meta = NULL;
    struct gguf_init_params params = { /*.no_alloc =*/ true, /*.ctx =*/ &meta };
    struct gguf_context * ctx = gguf_init_from_file(argv[1], params);
    if (ctx == NULL) {
        return refuse(log_len ? log_buf : "gguf_init_from_file failed");
    }
    struct stat st;
    if (stat(argv[1], &st) != 0) {
        return refuse("stat failed");
    }
    const uint64_t file_size = (uint64_t) st.st_size;
    const int64_t n_tensors = gguf_get_n_tensors(ctx);
    const size_t data_offset = gguf_get_data_offset(ctx);
    /* llama_model_loader's loop over the context's tensors: a C-string name seen before is refused
     * ("invalid model: tensor '%s' is duplicated"), then llama_tensor_weight: the data within the file */
    int64_t i = 0;
    for (struct ggml_tensor * cur = ggml_get_first_tensor(meta); cur; cur = ggml_get_next_tensor(meta, cur), i++) {
        char msg[256];
        for (struct ggml_tensor * prev = ggml_get_first_tensor(meta); prev != cur; prev = ggml_get_next_tensor(meta, prev)) {
            if (strcmp(prev->name, cur->name) == 0) {
                snprintf(msg, sizeof(msg), "invalid model: tensor '%s' is duplicated", cur->name);
                return refuse(msg);
            }
        }
        const int64_t idx = gguf_find_tensor(ctx, cur->name);
        const uint64_t offs = data_offset + gguf_get_tensor_offset(ctx, idx);
        const uint64_t nbytes = ggml_nbytes(cur);
        if (offs + nbytes < offs || offs + nbytes > file_size) {
            snprintf(msg, sizeof(msg), "tensor '%s' data is not within the file bounds, model is corrupted or incomplete", cur->name);
            return refuse(msg);
        }
    }
    if (i != n_tensors) {
        return refuse("the ggml context holds another number of tensors than the GGUF");
    }
    printf("{\"ok\": true, \"version\": %" PRIu32 ", \"alignment\": %zu, \"data_offset\": %zu, \"n_kv\": %" PRId64
           ", \"tensors\": [", gguf_get_version(ctx), gguf_get_alignment(ctx), data_offset, gguf_get_n_kv(ctx));
    i = 0;
    for (struct ggml_tensor * t = ggml_get_first_tensor(meta); t; t = ggml_get_next_tensor(meta, t), i++) {
        printf("%s{\"name\": ", i ? ", " : "");
        json_string(t->name);
        printf(", \"type\": %d, \"ne\": [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "], \"offset\": %zu, \"nbytes\": %zu}",
               (int) t->type, t->ne[0], t->ne[1], t->ne[2], t->ne[3], data_offset + gguf_get_tensor_offset(ctx, i),
               ggml_nbytes(t));
    }
    printf("]}\n");
    gguf_free(ctx);
    ggml_free(meta);
    return 0;
}
