/*
 * tiletune's C ABI from C: load a model, generate greedily, and check the
 * tokens. Also the example of the ABI's use (README.md): status codes with
 * tt_last_error(), owned buffers freed by their free function, a session
 * that outlives its model.
 *
 *   generate --model PATH (--prompt TEXT | --ids 1,2,3) [-n N] [--threads T]
 *            [--expect 4,5,6]
 *
 * Prints the prompt ids and the generated ids, one line each. The tokens
 * are generated twice, pulled step by step (tt_generation_next) and streamed
 * to a callback (tt_session_generate) on a second session; the two must
 * agree, and with --expect equal the given ids. Exits 0 only if all holds.
 */
#include "tiletune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_IDS 4096

static int fail(const char *what) {
    const char *msg = tt_last_error();
    fprintf(stderr, "generate: %s: %s\n", what, msg ? msg : "(no message)");
    return 1;
}

/* "1,2,3" into ids; returns the count, or -1 on a malformed list. */
static long parse_ids(const char *s, uint32_t *ids) {
    long n = 0;
    while (*s) {
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || n == MAX_IDS) return -1;
        ids[n++] = (uint32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') return -1;
    }
    return n;
}

static void print_ids(const char *label, const uint32_t *ids, size_t n) {
    printf("%s:", label);
    for (size_t i = 0; i < n; i++) printf("%s%u", i ? "," : " ", ids[i]);
    printf("\n");
}

/* What the streaming callback saw. */
struct seen {
    uint32_t ids[MAX_IDS];
    size_t n;
};

static int32_t on_token(void *user, uint32_t token, const char *text, size_t len) {
    struct seen *s = user;
    (void)text;
    (void)len;
    if (s->n < MAX_IDS) s->ids[s->n++] = token;
    return 0; /* non-zero would stop the generation here */
}

int main(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL, *ids_arg = NULL, *expect_arg = NULL;
    unsigned n_predict = 16, threads = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--model")) model_path = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt")) prompt = argv[i + 1];
        else if (!strcmp(argv[i], "--ids")) ids_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--expect")) expect_arg = argv[i + 1];
        else if (!strcmp(argv[i], "-n")) n_predict = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = (unsigned)atoi(argv[i + 1]);
        else {
            fprintf(stderr, "generate: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    if (!model_path || (!prompt == !ids_arg) || n_predict == 0) {
        fprintf(stderr, "usage: generate --model PATH (--prompt TEXT | --ids 1,2,3) [-n N] "
                        "[--threads T] [--expect IDS]\n");
        return 2;
    }

    /* Bad arguments are status codes with a message, never a crash. */
    TtModel *model = NULL;
    if (tt_model_load(NULL, &model) != TT_ERR_NULL || model != NULL || !tt_last_error())
        return fail("a NULL options pointer was not refused");

    TtModelOptions opts;
    tt_model_options_default(&opts);
    opts.path = model_path;
    opts.threads = threads;
    if (tt_model_load(&opts, &model) != TT_OK) return fail("loading the model");

    static uint32_t prompt_ids[MAX_IDS];
    size_t n_prompt = 0;
    if (prompt) {
        uint32_t *ids = NULL;
        if (tt_tokenize(model, prompt, TT_TOKENIZE_ADD_SPECIAL | TT_TOKENIZE_PARSE_SPECIAL,
                        &ids, &n_prompt) != TT_OK)
            return fail("tokenizing the prompt");
        if (n_prompt > MAX_IDS) return fail("prompt too long");
        memcpy(prompt_ids, ids, n_prompt * sizeof *ids);
        tt_tokens_free(ids, n_prompt);
    } else {
        long n = parse_ids(ids_arg, prompt_ids);
        if (n <= 0) {
            fprintf(stderr, "generate: --ids takes comma-separated integers\n");
            return 2;
        }
        n_prompt = (size_t)n;
    }

    TtGenerateOptions gen;
    tt_generate_options_default(&gen);
    gen.sampler.temperature = 0.0f; /* greedy */
    gen.max_tokens = n_predict;

    /* Two sessions; the model handle is freed before they are used: each
     * session keeps the model alive. */
    TtSession *pulled = NULL, *streamed = NULL;
    if (tt_session_new(model, &pulled) != TT_OK || tt_session_new(model, &streamed) != TT_OK)
        return fail("making sessions");
    tt_model_free(model);

    /* Pulled step by step. */
    static uint32_t got[MAX_IDS];
    size_t n_got = 0;
    TtGeneration *g = NULL;
    if (tt_generation_start(pulled, prompt_ids, n_prompt, &gen, &g) != TT_OK)
        return fail("starting the generation");
    TtStep step;
    do {
        if (tt_generation_next(g, &step) != TT_OK) return fail("generating");
        if (step.has_token && n_got < MAX_IDS) got[n_got++] = step.token;
        fwrite(step.text, 1, step.text_len, stderr);
    } while (step.stop == TT_STOP_NONE);
    fprintf(stderr, "\n");
    tt_generation_free(g);
    tt_session_free(pulled);

    /* Streamed to a callback, with the ids handed back as an owned array. */
    static struct seen seen;
    uint32_t *out = NULL;
    size_t n_out = 0;
    TtGenerateResult res;
    if (tt_session_generate(streamed, prompt_ids, n_prompt, &gen, on_token, &seen, &out, &n_out,
                            &res) != TT_OK)
        return fail("streaming the generation");
    tt_session_free(streamed);

    print_ids("prompt_ids", prompt_ids, n_prompt);
    print_ids("generated_ids", got, n_got);
    int ok = n_out == n_got && seen.n == n_got && res.n_tokens == n_got &&
             !memcmp(out, got, n_got * sizeof *got) && !memcmp(seen.ids, got, n_got * sizeof *got);
    tt_tokens_free(out, n_out);
    if (!ok) {
        fprintf(stderr, "generate: the streamed tokens differ from the pulled ones\n");
        return 1;
    }
    if (expect_arg) {
        static uint32_t want[MAX_IDS];
        long n_want = parse_ids(expect_arg, want);
        if (n_want < 0 || (size_t)n_want != n_got || memcmp(want, got, n_got * sizeof *got)) {
            fprintf(stderr, "generate: the tokens differ from --expect %s\n", expect_arg);
            return 1;
        }
        printf("ok: %zu tokens as expected\n", n_got);
    }
    return 0;
}
