-- +goose Up
-- The licensing schema starts empty; its tables come with its handlers.
SELECT 1;

-- +goose Down
SELECT 1;
