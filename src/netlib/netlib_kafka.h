/* librdkafka's functions, loaded on first use (netlib.h says why and how):
 * the Kafka consumer of chunks (kafka/chunk.c), the producer
 * (kafka/producer.c) and the job spec's check of Kafka properties
 * (dpp/pipeline/spec_kafka.c). With OpenSSL, SASL and libstdc++ it was
 * about half of a worker's remaining start. */
#ifndef SLUICE_NETLIB_NETLIB_KAFKA_H
#define SLUICE_NETLIB_NETLIB_KAFKA_H

#include <librdkafka/rdkafka.h>

#include "netlib/netlib.h"

/* The functions of librdkafka that sluice calls (field: the name less
 * rd_kafka_). */
#define SL_NETLIB_KAFKA_FUNCS(X)                                                                   \
    X(rd_kafka_assign, assign)                                                                     \
    X(rd_kafka_commit_queue, commit_queue)                                                         \
    X(rd_kafka_conf, conf)                                                                         \
    X(rd_kafka_conf_destroy, conf_destroy)                                                         \
    X(rd_kafka_conf_get, conf_get)                                                                 \
    X(rd_kafka_conf_new, conf_new)                                                                 \
    X(rd_kafka_conf_set, conf_set)                                                                 \
    X(rd_kafka_conf_set_dr_msg_cb, conf_set_dr_msg_cb)                                             \
    X(rd_kafka_conf_set_error_cb, conf_set_error_cb)                                               \
    X(rd_kafka_conf_set_log_cb, conf_set_log_cb)                                                   \
    X(rd_kafka_conf_set_opaque, conf_set_opaque)                                                   \
    X(rd_kafka_conf_set_stats_cb, conf_set_stats_cb)                                               \
    X(rd_kafka_consume_batch_queue, consume_batch_queue)                                           \
    X(rd_kafka_consumer_close, consumer_close)                                                     \
    X(rd_kafka_consumer_poll, consumer_poll)                                                       \
    X(rd_kafka_destroy, destroy)                                                                   \
    X(rd_kafka_err2name, err2name)                                                                 \
    X(rd_kafka_err2str, err2str)                                                                   \
    X(rd_kafka_error_destroy, error_destroy)                                                       \
    X(rd_kafka_event_destroy, event_destroy)                                                       \
    X(rd_kafka_event_error, event_error)                                                           \
    X(rd_kafka_event_error_string, event_error_string)                                             \
    X(rd_kafka_event_topic_partition_list, event_topic_partition_list)                             \
    X(rd_kafka_fatal_error, fatal_error)                                                           \
    X(rd_kafka_flush, flush)                                                                       \
    X(rd_kafka_header_add, header_add)                                                             \
    X(rd_kafka_header_get, header_get)                                                             \
    X(rd_kafka_header_get_all, header_get_all)                                                     \
    X(rd_kafka_headers_copy, headers_copy)                                                         \
    X(rd_kafka_headers_destroy, headers_destroy)                                                   \
    X(rd_kafka_headers_new, headers_new)                                                           \
    X(rd_kafka_last_error, last_error)                                                             \
    X(rd_kafka_message_destroy, message_destroy)                                                   \
    X(rd_kafka_message_errstr, message_errstr)                                                     \
    X(rd_kafka_message_headers, message_headers)                                                   \
    X(rd_kafka_message_timestamp, message_timestamp)                                               \
    X(rd_kafka_metadata, metadata)                                                                 \
    X(rd_kafka_metadata_destroy, metadata_destroy)                                                 \
    X(rd_kafka_new, new)                                                                           \
    X(rd_kafka_offsets_for_times, offsets_for_times)                                               \
    X(rd_kafka_opaque, opaque)                                                                     \
    X(rd_kafka_outq_len, outq_len)                                                                 \
    X(rd_kafka_pause_partitions, pause_partitions)                                                 \
    X(rd_kafka_poll, poll)                                                                         \
    X(rd_kafka_poll_set_consumer, poll_set_consumer)                                               \
    X(rd_kafka_producev, producev)                                                                 \
    X(rd_kafka_purge, purge)                                                                       \
    X(rd_kafka_query_watermark_offsets, query_watermark_offsets)                                   \
    X(rd_kafka_queue_destroy, queue_destroy)                                                       \
    X(rd_kafka_queue_get_consumer, queue_get_consumer)                                             \
    X(rd_kafka_queue_new, queue_new)                                                               \
    X(rd_kafka_queue_poll, queue_poll)                                                             \
    X(rd_kafka_resume_partitions, resume_partitions)                                               \
    X(rd_kafka_seek_partitions, seek_partitions)                                                   \
    X(rd_kafka_topic_destroy, topic_destroy)                                                       \
    X(rd_kafka_topic_name, topic_name)                                                             \
    X(rd_kafka_topic_new, topic_new)                                                               \
    X(rd_kafka_topic_partition_list_add, topic_partition_list_add)                                 \
    X(rd_kafka_topic_partition_list_destroy, topic_partition_list_destroy)                         \
    X(rd_kafka_topic_partition_list_new, topic_partition_list_new)                                 \
    X(rd_kafka_topic_result_error, topic_result_error)                                             \
    X(rd_kafka_AdminOptions_destroy, AdminOptions_destroy)                                         \
    X(rd_kafka_AdminOptions_new, AdminOptions_new)                                                 \
    X(rd_kafka_AdminOptions_set_operation_timeout, AdminOptions_set_operation_timeout)             \
    X(rd_kafka_AdminOptions_set_request_timeout, AdminOptions_set_request_timeout)                 \
    X(rd_kafka_CreateTopics, CreateTopics)                                                         \
    X(rd_kafka_CreateTopics_result_topics, CreateTopics_result_topics)                             \
    X(rd_kafka_NewTopic_destroy, NewTopic_destroy)                                                 \
    X(rd_kafka_NewTopic_new, NewTopic_new)                                                         \
    X(rd_kafka_event_CreateTopics_result, event_CreateTopics_result)                               \
    X(rd_kafka_topic_result_error_string, topic_result_error_string)

typedef struct sl_netlib_kafka {
    SL_NETLIB_KAFKA_FUNCS(SL_NETLIB_FIELD)
} sl_netlib_kafka_t;

/* librdkafka's functions, loaded on the first call (thread-safe); as
 * sl_netlib_mhd. Not in libsluice_trainer.so. */
const sl_netlib_kafka_t *sl_netlib_kafka(sl_error_t *err);

#endif
