/* The reference of job specs (docs/JOBS.md) as Markdown, printed from the
 * tables that parse specs: the keys (spec.h, spec.c) and the ops (ops.h,
 * ops.c). `sluice help --markdown` prints it and a ctest compares it with
 * the docs, so the reference cannot drift from the parser. */
#include <inttypes.h>
#include <string.h>

#include "dpp/pipeline/ops.h"
#include "dpp/pipeline/spec.h"

static const char *const sections[] = {"job",         "job source",     "job batch",
                                       "job filters", "job transforms", NULL};

const char *const *sl_pipeline_spec_sections(void)
{
    return sections;
}

/* Text inside a table cell: '|' would end the cell. */
static void cell(FILE *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '|') fputc('\\', out);
        fputc(*s, out);
    }
}

/* ---- keys ---- */

static void field_type(FILE *out, const dpp_field_t *f)
{
    if (f->type_doc != NULL) {
        cell(out, f->type_doc);
        return;
    }
    switch (f->type) {
    case FIELD_STRING:
        fputs("non-empty string", out);
        return;
    case FIELD_UINT:
        fprintf(out, "integer in [%" PRIu64 ", %" PRIu64 "]", f->lo, f->hi);
        return;
    case FIELD_BOOL:
        fputs("bool", out);
        return;
    case FIELD_ENUM:
        for (size_t k = 0; f->choices[k] != NULL; k++)
            fprintf(out, "%s`\"%s\"`",
                    k == 0                      ? ""
                    : f->choices[k + 1] == NULL ? " or "
                                                : ", ",
                    f->choices[k]);
        return;
    case FIELD_OBJECT:
        fputs("object", out);
        return;
    case FIELD_CUSTOM:
        return;
    }
}

static void field_default(FILE *out, const dpp_field_t *f)
{
    if (f->required) {
        fputs("**required**", out);
    } else if (f->def_doc != NULL) {
        cell(out, f->def_doc);
    } else {
        switch (f->type) {
        case FIELD_STRING:
            if (f->def.s != NULL)
                fprintf(out, "`\"%s\"`", f->def.s);
            else
                fputs("none", out);
            break;
        case FIELD_UINT:
            fprintf(out, "%" PRIu64, f->def.u);
            break;
        case FIELD_BOOL:
            fputs(f->def.u ? "true" : "false", out);
            break;
        case FIELD_ENUM:
            fprintf(out, "`\"%s\"`", f->choices[f->def.u]);
            break;
        default:
            fputs("none", out);
            break;
        }
    }
}

/* The rows of object; with flatten, the keys of objects inside it as
 * "outer.inner" rows (else one row per object, which has its own
 * section). */
static void field_rows(FILE *out, const dpp_object_t *object, const char *prefix, bool flatten)
{
    for (uint32_t i = 0; i < object->count; i++) {
        const dpp_field_t *f = &object->fields[i];
        if (f->type == FIELD_OBJECT && flatten) {
            char inner[64];
            snprintf(inner, sizeof inner, "%s%s.", prefix, f->name);
            field_rows(out, f->object, inner, true);
            continue;
        }
        fprintf(out, "| `%s%s` | ", prefix, f->name);
        field_type(out, f);
        fputs(" | ", out);
        field_default(out, f);
        fputs(" | ", out);
        cell(out, f->doc);
        fputs(" |\n", out);
    }
}

static void keys_table(FILE *out, const dpp_object_t *object, bool flatten)
{
    fputs("| key | type | default | meaning |\n| --- | --- | --- | --- |\n", out);
    field_rows(out, object, "", flatten);
}

/* ---- ops ---- */

static void arg_default(FILE *out, const dpp_arg_t *a)
{
    switch (a->how) {
    case DEF_REQUIRED:
        fputs("required", out);
        return;
    case DEF_NAME:
        fprintf(out, "default `%s`", a->def.s);
        return;
    case DEF_BOUND:
        fprintf(out, "default: %s", a->def_doc);
        return;
    case DEF_VALUE:
        break;
    }
    fputs("default ", out);
    if (a->def_doc != NULL) {
        cell(out, a->def_doc);
        return;
    }
    switch (a->type) {
    case ARG_NUMBER:
    case ARG_POS_NUMBER:
    case ARG_RATE:
        fprintf(out, "%g", a->def.d);
        return;
    case ARG_INT:
        fprintf(out, "%" PRId64, a->def.i);
        return;
    case ARG_STRING:
    case ARG_NAME:
        fprintf(out, "`\"%s\"`", a->def.s);
        return;
    default:
        fprintf(out, "%" PRIu64, a->def.u);
        return;
    }
}

static void op_args(FILE *out, const dpp_op_spec_t *op)
{
    if (op->args[0].name == NULL) fputs("—", out);
    for (int k = 0; k < DPP_MAX_ARGS && op->args[k].name != NULL; k++) {
        const dpp_arg_t *a = &op->args[k];
        fprintf(out, "%s`%s` (%s, ", k == 0 ? "" : "<br>", a->name, dpp_arg_type_text(a->type));
        arg_default(out, a);
        fputs("): ", out);
        cell(out, a->doc);
    }
    if (op->rules & DPP_RULE_NEEDS_BOUND) fputs("<br>at least one of `min`, `max`", out);
    if (op->rules & DPP_RULE_MIN_LE_MAX) fputs("<br>`min <= max`", out);
}

static const char *input_text(dpp_input_t in)
{
    switch (in) {
    case IN_SPARSE:
        return "sparse / weighted";
    case IN_DENSE:
        return "dense";
    case IN_WEIGHTED:
        return "weighted";
    case IN_ANY:
        return "any";
    case IN_NONE:
        break;
    }
    return "—";
}

static void ops_table(FILE *out, bool filters)
{
    uint32_t n = 0;
    const dpp_op_spec_t *ops = dpp_ops(&n);
    fputs(filters ? "| op | arguments | keeps |\n| --- | --- | --- |\n"
                  : "| op | input | arguments | result |\n| --- | --- | --- | --- |\n",
          out);
    for (uint32_t i = 0; i < n; i++) {
        if (ops[i].filter != filters) continue;
        fprintf(out, "| `%s` | ", ops[i].name);
        if (!filters) fprintf(out, "%s | ", input_text(ops[i].input));
        op_args(out, &ops[i]);
        fputs(" | ", out);
        cell(out, ops[i].doc);
        fputs(" |\n", out);
    }
}

bool sl_pipeline_spec_markdown(FILE *out, const char *section)
{
    if (strcmp(section, "job") == 0) {
        keys_table(out, &dpp_spec_root, false);
        return true;
    }
    if (strcmp(section, "job filters") == 0 || strcmp(section, "job transforms") == 0) {
        ops_table(out, strcmp(section, "job filters") == 0);
        return true;
    }
    for (uint32_t i = 0; i < dpp_spec_root.count; i++) {
        const dpp_field_t *f = &dpp_spec_root.fields[i];
        if (f->type == FIELD_OBJECT && strncmp(section, "job ", 4) == 0 &&
            strcmp(section + 4, f->name) == 0) {
            keys_table(out, f->object, true);
            return true;
        }
    }
    return false;
}
