"""The transaction coordinator (Kafka's kafka.coordinator.transaction): the state of
every transactional id led here, kept in __transaction_state, and the markers that
end each transaction in the partitions it wrote to."""
