-- A human label for an endpoint: operators recognise "Billing (prod)" on a
-- dashboard, not endpoint 7 or a long URL. Both optional; the checks keep
-- them to what a table cell and a tooltip can show.
ALTER TABLE endpoints
    ADD COLUMN name text CHECK (name IS NULL OR length(name) BETWEEN 1 AND 100),
    ADD COLUMN description text CHECK (description IS NULL OR length(description) <= 1000);
