/* init_from.h — model.init_from's architecture: a config that fine-tunes a Hugging Face folder takes
 * its model section from the folder's config.json, as `from_pretrained` does, so a user writes only
 * the training keys. A model key the config does give must agree with the folder (one line naming
 * the key where it was set and the folder's value); a Llama-family model may be given a shorter
 * context (model.n_positions) than it was built for, its positions being rotary. */
#ifndef ZT_INIT_FROM_H
#define ZT_INIT_FROM_H

#include "config/config.h"
#include "util/util.h"

/* Nothing without model.init_from; else CFG's model keys become the folder's (effective_text
 * regenerated), or -1 with ERR naming the disagreeing key. */
int zt_config_adopt_init_from(zt_config *cfg, zt_err *err);

#endif
